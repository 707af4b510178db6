"""A client of a cluster split over shards starts while one shard's master is down (it could not start
before: Store.connect raised), sees that shard's keys as misses and its puts fail, the other shard served
as usual, and joins the shard once its master answers (kvstore.cluster.shard_joins, as a node does): a
buffer registered meanwhile is registered with that shard's engine too, and its keys put and read back.
Real master and node processes, two shards in a static list."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.errors import MasterUnavailableError
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_ha import _free_port


def value(key: str) -> bytes:
    return np.random.default_rng(sum(key.encode())).integers(0, 256, 3000, dtype=np.uint8).tobytes()


def test_a_client_starts_while_a_shard_is_down_and_joins_it_once_it_answers() -> None:
    keys = [f"late/{i}" for i in range(40)]
    on = [[k for k in keys if shard_of(k, 2) == s] for s in (0, 1)]
    assert on[0] and on[1]
    down_port = _free_port()  # shard 1's master, started later
    with kvstore_process(["master", "--port", "0", "--shard", "0", "--shards", "2"]) as (_, ready):
        masters = f"{ready.split()[0]};127.0.0.1:{down_port}"
        with (
            kvstore_process(["node", "--master", masters, "--segment-size", "64MiB"]),
            Store.connect(masters, rpc_timeout=3.0) as store,
        ):
            assert isinstance(store, ShardedStore)
            first, late = store.stores
            assert first is not None and late is None  # started: shard 0 joined, shard 1 not yet
            wait_for_mounts(first, 1)
            buffer = np.zeros(3000 * len(on[1]), dtype=np.uint8)
            store.register_buffer(buffer)  # (before shard 1 joins: it gets it when it does)

            codes = store.batch_put_from(keys, [value(k) for k in keys])
            assert [c == 0 for c in codes] == [shard_of(k, 2) == 0 for k in keys]
            got = store.batch_get(keys)
            assert got == [value(k) if shard_of(k, 2) == 0 else None for k in keys]
            assert store.batch_exists(on[1]) == [False] * len(on[1])
            with pytest.raises(MasterUnavailableError, match="not joined yet"):
                store.put(on[1][0], value(on[1][0]))

            with kvstore_process(["master", "--port", str(down_port), "--shard", "1", "--shards", "2"]):
                deadline = time.monotonic() + 40
                while store.stores[1] is None:
                    assert time.monotonic() < deadline, "shard 1 was not joined after its master started"
                    time.sleep(0.1)
                joined = store.stores[1]
                assert joined is not None
                wait_for_mounts(joined, 1, 40)  # (the node joins it on its own retries)
                assert store.batch_put_from(on[1], [value(k) for k in on[1]]) == [0] * len(on[1])
                views = [buffer[i * 3000 : (i + 1) * 3000] for i in range(len(on[1]))]
                assert store.batch_get_into(on[1], views) == [3000] * len(on[1])
                assert [v.tobytes() for v in views] == [value(k) for k in on[1]]
                assert store.batch_get(keys) == [value(k) for k in keys]
                store.unregister_buffer(buffer)  # (raises for a store it was never registered with)
