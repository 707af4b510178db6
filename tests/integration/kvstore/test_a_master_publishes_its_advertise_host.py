"""--advertise-host (issue 43, section 5): the address a candidate master publishes into etcd, the one its
clients and nodes then connect to and `kvstore status` reports, is the advertised one; a master bound to
every address (0.0.0.0, ::) with etcd and no advertise host is refused before it binds, naming the option,
where it published 0.0.0.0:PORT as the leader's. A real etcd and real master, node and client processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kvstore import Store
from kvstore.config import MasterConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError
from kvstore.procs import kvstore_process
from kvstore.rpc import etcd as etcd_keys
from kvstore.rpc.etcd_records import CANDIDATE, LEADER, Records
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_ha import HA, etcd_server
from transfer_engine.procs import READY_PREFIX

CLUSTER = "advertised"
ADVERTISED = "localhost"  # (resolves to 127.0.0.1 here, where the master listens; never what it binds)


@pytest.fixture
def etcd_address(tmp_path: Path) -> Iterator[str]:
    with etcd_server(tmp_path, "127.0.0.1") as (address, _):
        yield address


def test_the_advertised_address_is_published_and_followed(etcd_address: str) -> None:
    args = [
        "master",
        "--host",
        "127.0.0.1",
        "--advertise-host",
        ADVERTISED,
        "--port",
        "0",
        "--http-port",
        "0",
    ]
    with ExitStack() as stack:
        _, ready = stack.enter_context(
            kvstore_process([*args, "--etcd", etcd_address, "--cluster", CLUSTER, *HA])
        )
        address = ready.split()[0]
        assert address.startswith(f"{ADVERTISED}:"), ready
        node = ["node", "--etcd", etcd_address, "--cluster", CLUSTER, "--segment-size", "32MiB"]
        stack.enter_context(kvstore_process(node))
        with Store.connect(etcd=etcd_address, cluster=CLUSTER, rpc_timeout=5.0) as store:
            wait_for_mounts(store, 1)
            store.put("k", b"advertised")
            assert store.get("k") == b"advertised"

        etcd = etcd_keys.connect(etcd_address, 1.0)
        records = Records(SecurityConfig.load().secret(), CLUSTER)
        value, meta = etcd.get(etcd_keys.leader_key(CLUSTER))
        leader = records.decode(LEADER, value, meta.lease_id)
        assert leader is not None and leader.address == address
        candidates = list(etcd.get_prefix(etcd_keys.candidates_prefix(CLUSTER)))
        assert [records.decode(CANDIDATE, v, m.lease_id).address for v, m in candidates] == [address]  # type: ignore[union-attr]

        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "kvstore.cli",
                "status",
                "--json",
                "--etcd",
                etcd_address,
                "--cluster",
                CLUSTER,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["master"]["address"] == address


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_wildcard_host_with_etcd_and_no_advertise_host_is_refused(etcd_address: str, host: str) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvstore.cli",
            "master",
            "--port",
            "0",
            "--etcd",
            etcd_address,
            "--cluster",
            CLUSTER,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "KVSTORE_MASTER_HOST": host},
    )
    assert run.returncode == 1, run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert "listens on every address" in lines[0] and "--advertise-host" in lines[0], lines
    assert "KVSTORE_MASTER_ADVERTISE_HOST" in lines[0]
    value, _ = etcd_keys.connect(etcd_address, 1.0).get(etcd_keys.leader_key(CLUSTER))
    assert value is None  # nothing published


def test_advertise_host_values_are_checked() -> None:
    etcd = {"etcd": "127.0.0.1:2379"}
    assert MasterConfig.load(host="0.0.0.0", advertise_host="10.1.2.3", **etcd).advertise_host == "10.1.2.3"
    assert MasterConfig.load(host="::", advertise_host="fd00::1", **etcd).advertise_host == "fd00::1"
    assert MasterConfig.load(host="0.0.0.0").host == "0.0.0.0"  # (no etcd: nothing is published)
    for bad in ("0.0.0.0", "::", "host:50051", "two words", "[::]"):
        with pytest.raises(InvalidArgumentError, match="advertise_host"):
            MasterConfig.load(advertise_host=bad)
    with pytest.raises(InvalidArgumentError, match="--advertise-host"):
        MasterConfig.load(host="0.0.0.0", **etcd)


def test_a_candidate_without_a_secret_on_every_address_is_refused_before_it_campaigns(
    etcd_address: str,
) -> None:
    """Listening beyond loopback needs the cluster secret (or --insecure); a candidate learnt that only
    once it had won, and exited leaderless. Now it exits before it publishes anything."""
    without = {k: v for k, v in os.environ.items() if not k.startswith("KVSTORE_CLUSTER_SECRET")}
    etcd = etcd_keys.connect(etcd_address, 1.0)
    before = etcd.status().raft_index
    where = ["--host", "0.0.0.0", "--advertise-host", "10.9.8.7", "--port", "0"]
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "master", *where, "--etcd", etcd_address, "--cluster", CLUSTER],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=without,
    )
    assert run.returncode == 1 and "no cluster secret" in run.stderr, (run.stdout, run.stderr)
    assert READY_PREFIX not in run.stdout  # it never said it campaigns
    assert etcd.status().raft_index == before  # nor wrote anything to etcd (a lease, its keys)
