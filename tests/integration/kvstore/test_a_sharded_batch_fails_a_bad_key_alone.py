"""A client of two shards treats a value that is not a key (an int, bytes, None in a batch of keys) as one
Store does: that key alone fails under the key rule, the rest of the batch is served, and the one-key
calls raise what one Store raises. Before: the batch's routing ("".join of the keys, str.encode of each)
raised TypeError for the whole batch, outside the KVStoreError hierarchy. Real processes: a one-shard
cluster and a two-shard cluster, each a master per shard and a node; the same calls on both compared."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import numpy as np
import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.errors import KVStoreError
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts

SIZE = 4096
BAD: list[Any] = [7, b"bytes-key", None]


def _cluster(stack: ExitStack, shards: int) -> Store | ShardedStore:
    masters = []
    for shard in range(shards):
        extra = ["--shard", str(shard), "--shards", str(shards)] if shards > 1 else []
        _, ready = stack.enter_context(kvstore_process(["master", "--port", "0", *extra]))
        masters.append(ready.split()[0])
    stack.enter_context(kvstore_process(["node", "--master", ";".join(masters), "--segment-size", "64MiB"]))
    store = stack.enter_context(Store.connect(";".join(masters)))
    for part in store.stores if isinstance(store, ShardedStore) else [store]:
        wait_for_mounts(part, 1)
    return store


def _keys(prefix: str) -> list[Any]:
    """Good keys on both shards with a bad value between each."""
    good = [f"{prefix}/{i}" for i in range(6)]
    assert {shard_of(k, 2) for k in good} == {0, 1}
    out: list[Any] = []
    for i, key in enumerate(good):
        out += [key, BAD[i % len(BAD)]] if i < len(BAD) else [key]
    return out


def _outcome(call: Callable[[], Any]) -> Any:
    """What a call gives, or the class of the KVStoreError it raises (a TypeError is not caught)."""
    try:
        return call()
    except KVStoreError as exc:
        return type(exc)


def _values(keys: list[Any]) -> list[bytes]:
    return [bytes([1 + i]) * SIZE for i in range(len(keys))]


def _each_batch_call(store: Any) -> dict[str, Any]:
    """Every batch call with bad keys among good ones (puts first, then what reads them back)."""
    seen: dict[str, Any] = {}
    keys = _keys("batch")
    seen["batch_put_from"] = _outcome(lambda: store.batch_put_from(keys, _values(keys)))
    detailed = _keys("detailed")
    seen["batch_put_detailed"] = _outcome(
        lambda: [r.code for r in store.batch_put_detailed(detailed, [[v] for v in _values(detailed)])]
    )
    seen["put_blocks"] = _outcome(lambda: store.put_blocks(_keys("blocks"), _values(_keys("blocks"))))
    seen["batch_get"] = _outcome(lambda: store.batch_get(keys))
    seen["batch_exists"] = _outcome(lambda: store.batch_exists(keys))
    seen["locate"] = _outcome(lambda: [found is not None for found in store.locate(keys)])
    out = np.zeros((len(keys), SIZE), dtype=np.uint8)
    store.register_buffer(out)
    seen["batch_get_into"] = _outcome(lambda: store.batch_get_into(keys, list(out)))
    seen["read back"] = [bytes(row) for row in out]
    out.fill(0)
    seen["get_blocks"] = _outcome(lambda: store.get_blocks(_keys("blocks"), list(out)))
    store.unregister_buffer(out)
    seen["match_prefix"] = _outcome(lambda: store.match_prefix(keys).matched)
    seen["batch_remove"] = _outcome(lambda: store.batch_remove(keys))
    seen["batch_exists after remove"] = _outcome(lambda: store.batch_exists(keys))
    return seen


def _each_key_call(store: Any, bad: Any) -> dict[str, Any]:
    return {
        "put": _outcome(lambda: store.put(bad, b"v" * SIZE)),
        "get": _outcome(lambda: store.get(bad)),
        "get_into": _outcome(lambda: store.get_into(bad, bytearray(SIZE))),
        "put_from": _outcome(lambda: store.put_from(bad, b"v" * SIZE)),
        "change_replica": _outcome(lambda: store.change_replica(bad, 1)),
        "exists": _outcome(lambda: store.exists(bad)),
        "get_size": _outcome(lambda: store.get_size(bad)),
        "remove": _outcome(lambda: store.remove(bad)),
    }


def test_a_bad_key_fails_alone_as_in_one_store() -> None:
    with ExitStack() as stack:
        one, two = _cluster(stack, 1), _cluster(stack, 2)
        assert isinstance(two, ShardedStore) and not isinstance(one, ShardedStore)
        single, sharded = _each_batch_call(one), _each_batch_call(two)
        for call, result in single.items():
            assert sharded[call] == result, (call, sharded[call], result)
        # the good keys were served (the calls' results are not all failures)
        keys = _keys("batch")
        good = [i for i, k in enumerate(keys) if isinstance(k, str)]
        assert [single["batch_put_from"][i] for i in good] == [0] * len(good)
        assert [single["batch_get"][i] for i in good] == [_values(keys)[i] for i in good]
        assert all(single["batch_get"][i] is None for i in range(len(keys)) if i not in good)
        for bad in BAD:
            assert _each_key_call(two, bad) == _each_key_call(one, bad), bad


@pytest.mark.parametrize("bad", BAD)
def test_routing_sends_a_value_that_is_not_a_key_to_shard_0(bad: Any) -> None:
    from kvstore.cluster.shards import split_by_shard

    keys = ["route/a", bad, "route/b", "route/c", "route/d"]
    parts = split_by_shard(keys, 2)
    assert 1 in parts[0] and sorted(parts[0] + parts[1]) == list(range(len(keys)))
    assert shard_of(bad, 4) == 0
