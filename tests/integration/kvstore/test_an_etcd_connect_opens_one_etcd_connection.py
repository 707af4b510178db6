"""Store.connect with etcd reads the shard map over the connection it then finds its leader with: a
cluster of one shard opens one etcd connection, where it opened two (the map read's own, then the
leader's); a cluster of two shards opens one for the map and one per shard. Real etcd and masters; the
calls to kvstore.rpc.etcd.connect are counted as they are made."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.procs import kvstore_process
from kvstore.rpc import etcd as etcd_module
from tests.integration.kvstore.test_ha import HA, etcd_server


@pytest.fixture
def etcd_address(tmp_path: Path) -> Iterator[str]:
    with etcd_server(tmp_path, "127.0.0.1") as (address, _):
        yield address


def counted_connects(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real = etcd_module.connect

    def connect(endpoints: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(endpoints)
        return real(endpoints, *args, **kwargs)

    monkeypatch.setattr(etcd_module, "connect", connect)
    return opened


def test_one_shard_connects_to_etcd_once(etcd_address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    where = ["--etcd", etcd_address, "--cluster", "single"]
    with kvstore_process(["master", "--port", "0", *where, *HA]):
        opened = counted_connects(monkeypatch)
        with Store.connect(etcd=etcd_address, cluster="single", rpc_timeout=3.0) as store:
            assert not isinstance(store, ShardedStore)
            assert store.batch_exists(["k"]) == [False]
        assert opened == [etcd_address]


def test_two_shards_connect_once_for_the_map_and_once_per_shard(
    etcd_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ExitStack() as stack:
        for shard in (0, 1):
            where = ["--etcd", etcd_address, "--cluster", "split", "--shard", str(shard), "--shards", "2"]
            stack.enter_context(kvstore_process(["master", "--port", "0", *where, *HA]))
        opened = counted_connects(monkeypatch)
        with Store.connect(etcd=etcd_address, cluster="split", rpc_timeout=3.0) as store:
            assert isinstance(store, ShardedStore)
            assert store.batch_exists(["a", "b", "c"]) == [False] * 3
        assert len(opened) == 3
