"""Servers and settings as a user meets them: `kvstore master` / `kvstore node` started in the background
with stdin at /dev/null (nohup, systemd, `&` in a script), settings from KVSTORE_* variables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from kvstore import Store
from tests.e2e.test_cli import kvstore


@contextmanager
def server(*args: str, **env: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`kvstore ARGS` in the background with stdin at /dev/null; yields (process, its READY line)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstore.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in {**os.environ, **env}.items() if k != "KVSTORE_LIFELINE"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), (line, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, line.split(maxsplit=1)[1].strip()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _stays_up_then_stops_on(proc: subprocess.Popen[str], sig: signal.Signals) -> None:
    time.sleep(1.5)  # the defect: READY, then gone within 0.4 s
    assert proc.poll() is None, "a server with stdin at /dev/null exited on its own"
    proc.send_signal(sig)
    assert proc.wait(timeout=15) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_master_and_node_run_with_stdin_at_dev_null_until_signalled(sig: signal.Signals) -> None:
    with server("master", "--port", "0") as (master, ready):
        address = ready.split()[0]
        with server("node", "--master", address, "--segment-size", "16MiB") as (node, _):
            with Store.connect(address) as store:
                store.put("k", b"v")
                assert store.get("k") == b"v"
            _stays_up_then_stops_on(node, sig)
        _stays_up_then_stops_on(master, sig)


def test_a_node_with_a_pinned_segment_serves_gets() -> None:
    """`kvstore node --pinned` (and KVSTORE_NODE_PINNED=1) page-locks its segment and says how."""
    with server("master", "--port", "0") as (_, ready):
        address = ready.split()[0]
        with (
            server("node", "--master", address, "--segment-size", "16MiB", "--pinned") as (_, flag),
            server("node", "--master", address, "--segment-size", "16MiB", KVSTORE_NODE_PINNED="1") as (
                _,
                env,
            ),
        ):
            for line in (flag, env):
                assert line.split()[-1] in ("pinned=mlock", "pinned=cuda")
            with Store.connect(address) as store:
                assert store.stats()["master"]["capacity"] == 32 << 20
                keys = [f"pinned/{i}" for i in range(8)]
                store.batch_put_from(keys, [bytes([i]) * 65536 for i in range(8)], replicas=2)
                assert store.batch_get(keys) == [bytes([i]) * 65536 for i in range(8)]


def test_settings_come_from_the_environment_everywhere() -> None:
    """KVSTORE_* reach the master, the node, Store.connect and the benches; code still wins."""
    with server("master", KVSTORE_MASTER_PORT="0", KVSTORE_MASTER_LEASE_TTL="3") as (_, ready):
        address = ready.split()[0]
        env = {"KVSTORE_MASTER": address, "KVSTORE_TRANSPORT": "tcp", "KVSTORE_NODE_SEGMENT_SIZE": "24MiB"}
        with server("node", **env) as (_, node_ready):  # no --master: KVSTORE_MASTER
            node_name = node_ready.split()[0]
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                with Store.connect() as store:  # master, transport: from the environment
                    assert store.engine.config.transport == "tcp"
                    assert store.engine.config.origin("transport").variable == "KVSTORE_TRANSPORT"
                    assert store.leases.validity == pytest.approx(1.5)  # the master's lease, halved
                    assert store.stats()["master"]["capacity"] == 24 << 20
                    store.put("k", b"v")
                    assert store.engine.open_peer(node_name).transport == "tcp"
                with Store.connect(transport="shm") as store:  # code beats environment
                    assert store.engine.config.transport == "shm"
            finally:
                os.environ.clear()
                os.environ.update(saved)
            bench = kvstore(
                "bench", "store", "--master", address, "--ops", "exists", "--duration", "0.2", "--json",
                "--value-size", "4KiB", "--batch-size", "4", "--segment-size", "16MiB", **env,
            )  # fmt: skip
            assert bench.returncode == 0, bench.stderr
            assert json.loads(bench.stdout.splitlines()[0])["transport"] == "tcp"
    transfer = kvstore(
        "bench", "transfer", "--duration", "0.2", "--working-set", "16MiB", "--no-baseline", "--json",
        KVSTORE_TRANSPORT="tcp", KVSTORE_TCP_CONNECTIONS="3",
    )  # fmt: skip
    assert transfer.returncode == 0, transfer.stderr
    data = json.loads(transfer.stdout)
    assert data["transport"] == "tcp" and data["connections"] == 3


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"KVSTORE_TRANSPROT": "tcp"}, "KVSTORE_TRANSPROT; did you mean KVSTORE_TRANSPORT?"),
        ({"KVSTORE_PROTOCOL": "tcp"}, "KVSTORE_PROTOCOL; it is now KVSTORE_TRANSPORT"),
        ({"KVSTORE_TRANSPORT": "rdma"}, "transport must be one of auto, local, shm, tcp, cuda_ipc"),
        ({"KVSTORE_TCP_CONNECTIONS": "many"}, "KVSTORE_TCP_CONNECTIONS"),
        ({"KVSTORE_NODE_SEGMENT_SIZE": "big"}, "KVSTORE_NODE_SEGMENT_SIZE"),
        ({"KVSTORE_MASTER_CLIENT_TTL": "nan"}, "KVSTORE_MASTER_CLIENT_TTL"),
    ],
)
def test_a_bad_or_unknown_variable_is_an_error_naming_it(env: dict[str, str], says: str) -> None:
    for args in (["config"], ["master", "--port", "0"], ["node", "--master", "127.0.0.1:1"]):
        result = kvstore(*args, timeout=60, **env)
        assert result.returncode == 1, (args, result.stdout)
        assert says in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)


def test_config_prints_effective_settings_and_their_sources() -> None:
    result = kvstore("config", "--json", KVSTORE_TCP_CONNECTIONS="4", KVSTORE_MASTER_PORT="7000")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"engine", "client", "node", "master", "security", "index", "etcd"}
    rows = {(c, r["setting"]): r for c, rows in report.items() for r in rows}
    # The suite's cluster secret is in the environment: said to be set, never printed.
    secret = rows["security", "cluster_secret"]
    assert secret["value"] == "(set)" and secret["source"] == "environment KVSTORE_CLUSTER_SECRET"
    assert os.environ["KVSTORE_CLUSTER_SECRET"] not in result.stdout
    assert rows["engine", "tcp_connections"]["value"] == 4
    assert rows["engine", "tcp_connections"]["source"] == "environment KVSTORE_TCP_CONNECTIONS"
    assert rows["master", "port"]["value"] == 7000
    assert rows["engine", "transport"]["source"] == "default"
    assert rows["node", "segment_size"]["variable"] == "KVSTORE_NODE_SEGMENT_SIZE"
    listing = kvstore("config", "--variables", "--json")
    assert json.loads(listing.stdout)["KVSTORE_SHM_ENABLED"] == "engine.shm_enabled"
    table = kvstore("config", "--component", "engine", KVSTORE_TRANSPORT="tcp")
    assert table.returncode == 0 and "KVSTORE_TRANSPORT" in table.stdout and "environment" in table.stdout


def test_a_server_that_does_not_start_says_why() -> None:
    """A bench's or test's child that exits before READY is reported with what it wrote to stderr (a node
    that "did not start (exit 1)" and nothing more once cost a connector bench run its reason)."""
    from transfer_engine.errors import KVStoreError
    from transfer_engine.procs import module_process

    with (
        pytest.raises(KVStoreError, match=r"did not start \(exit 1\): .*cannot reach master 127\.0\.0\.1:1"),
        module_process("kvstore.cli", ["node", "--master", "127.0.0.1:1", "--segment-size", "64MiB"]),
    ):
        pass
