"""With etcd, the cluster's shard map (kvstore.rpc.etcd.shards_key) is what clients route by, so nobody
may guess it: a master started as the whole cluster refuses one the map splits over shards (it would
serve keys clients send to other shards' masters), and a client or node that cannot read etcd fails
rather than route every key as if there were one shard (review finding 1)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore import Store
from kvstore.config.security import SecurityConfig
from kvstore.errors import MasterUnavailableError
from kvstore.procs import kvstore_process
from kvstore.rpc import etcd as etcd_keys
from kvstore.rpc.etcd_records import Records
from tests.integration.kvstore.test_ha import etcd_server

CLUSTER = "mapped"


@pytest.fixture
def etcd_address(tmp_path: Path) -> Iterator[str]:
    with etcd_server(tmp_path, "127.0.0.1") as (address, _):
        yield address


def kvstore_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`kvstore ARGS` run to its end (60 s at most: a process that serves instead of refusing). An etcd
    that does not answer is waited for 2 s (KVSTORE_ETCD_START_WAIT; 60 by default), then refused."""
    command = [sys.executable, "-m", "kvstore.cli", *args]
    env = {**os.environ, "KVSTORE_ETCD_START_WAIT": "2"}
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env
    )


def nothing_listens() -> str:
    """An address of this host where nothing listens (a port just freed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_master_of_one_shard_refuses_a_cluster_split_over_two(etcd_address: str) -> None:
    client = etcd_keys.connect(etcd_address, 1.0)
    try:
        signed = Records(SecurityConfig.load().secret(), CLUSTER).encode_shards(2)
        client.put(etcd_keys.shards_key(CLUSTER), signed)
    finally:
        client.close()
    run = kvstore_cli("master", "--port", "0", "--etcd", etcd_address, "--cluster", CLUSTER)
    assert run.returncode != 0
    assert f"cluster {CLUSTER!r} is split over 2 shards in etcd, not 1" in run.stdout + run.stderr


def test_a_master_of_one_shard_starts_where_the_cluster_has_no_map(etcd_address: str) -> None:
    with kvstore_process(["master", "--port", "0", "--etcd", etcd_address, "--cluster", CLUSTER]) as (
        _,
        ready,
    ):
        assert f"cluster={CLUSTER}" in ready
        with Store.connect(etcd=etcd_address, cluster=CLUSTER, rpc_timeout=5.0) as store:
            assert store.batch_exists(["k"]) == [False]


def test_a_client_that_cannot_read_etcd_fails_instead_of_routing_to_one_shard() -> None:
    with pytest.raises(MasterUnavailableError, match="cannot read the shard map of cluster 'mapped'"):
        Store.connect(etcd=nothing_listens(), cluster=CLUSTER, rpc_timeout=2.0)


def test_a_node_that_cannot_read_etcd_exits_saying_why() -> None:
    run = kvstore_cli("node", "--etcd", nothing_listens(), "--cluster", CLUSTER, "--segment-size", "16MiB")
    assert run.returncode != 0
    assert "cannot read the shard map of cluster 'mapped'" in run.stderr
