"""KV events across shards: each shard's master publishes the blocks it holds, both publishers are
registered with `kvstore index` as the store (type "kvstore", one namespace), and the index credits a
prefix whose blocks lie on both shards as one run (its shared blocks are the union of the store's
publishers): a prefix spread over two masters is a hit as a whole, and removing a block on either shard
takes the credit back from there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kvstore import Store
from kvstore.blocks import BlockHasher, member_key, seq_hashes, seq_key
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.procs import kvstore_process
from tests.helpers import store_credit as credit
from tests.helpers.kv_event_publisher import Publisher
from tests.helpers.store_credit import call, eventually

BLOCK = 4
SLICES = 2
MODEL = "tiny-llama"
NAMESPACE = "tiny-llama/kv0"


def block_members(tokens: list[int], index: int) -> list[str]:
    seq = seq_hashes(tokens, BLOCK)[index]
    group = seq_key(NAMESPACE, seq, BlockHasher(BLOCK, NAMESPACE).keys(tokens)[index])
    return [member_key(group, s, SLICES) for s in range(SLICES)]


def stored_run(index: str, tokens: list[int], blocks: int) -> Callable[[], None]:
    def check() -> None:
        rows = credit.query(index, MODEL, BLOCK, tokens)
        assert rows["fresh"]["STORE"] == rows["fresh"]["longest_matched"] == blocks * BLOCK, rows

    return check


def wait_subscribed(index: str, store: ShardedStore) -> None:
    """A probe block on each shard, put until the index credits it (a PUB socket drops what it sends
    before its subscriber joined), then removed."""
    for shard in range(2):
        probe = next(
            t for t in ([900 + 10 * n + i for i in range(BLOCK)] for n in range(100))
            if shard_of(block_members(t, 0)[0], 2) == shard
        )  # fmt: skip
        keys = block_members(probe, 0)
        deadline = time.monotonic() + 30
        while True:
            assert store.batch_put_from(keys, [b"p" * 64] * SLICES) == [0] * SLICES
            try:
                eventually(stored_run(index, probe, 1), timeout=1.0)
                break
            except AssertionError:
                assert time.monotonic() < deadline, f"shard {shard}'s events never reached the index"
                store.batch_remove(keys)
        store.batch_remove(keys)
        eventually(stored_run(index, probe, 0))


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[str, ShardedStore]]:
    """Two shard masters, each publishing its KV events; a node; an index with an engine instance that
    never says a thing and both masters registered as the store."""
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(["index", "--port", "0"]))
        index = ready.removeprefix("http://")
        engine = Publisher()
        stack.callback(engine.close)
        base = {"modelname": MODEL, "block_size": BLOCK, "dp_rank": 0}
        status, reply = call(index, "/register", {
            **base, "endpoint": engine.endpoint, "replay_endpoint": engine.replay_endpoint, "type": "vLLM",
            "instance_id": "fresh",
        })  # fmt: skip
        assert status == 200, reply
        masters = []
        for shard in range(2):
            endpoint = f"ipc://{tmp_path}/events-{shard}"
            where = ["--shard", str(shard), "--shards", "2", "--kv-events-endpoint", endpoint]
            _, ready = stack.enter_context(kvstore_process(["master", "--port", "0", *where]))
            masters.append(ready.split()[0])
            status, reply = call(index, "/register", {
                **base, "endpoint": endpoint, "type": "kvstore", "instance_id": f"store-{shard}",
                "namespace": NAMESPACE,
            })  # fmt: skip
            assert status == 200, reply
        stack.enter_context(
            kvstore_process(["node", "--master", ";".join(masters), "--segment-size", "64MiB"])
        )
        store = stack.enter_context(Store.connect(";".join(masters)))
        assert isinstance(store, ShardedStore)
        wait_subscribed(index, store)
        yield index, store


def test_a_prefix_spread_over_two_shards_is_credited_as_one_run(deployment: tuple[str, ShardedStore]) -> None:
    index, store = deployment
    tokens = list(range(1000, 1000 + 8 * BLOCK))
    blocks = [block_members(tokens, i) for i in range(8)]
    on = [shard_of(b[0], 2) for b in blocks]
    assert set(on[:4]) == {0, 1}, on  # (the prefix's blocks lie on both shards)
    payload = [bytes([s]) * 4096 for s in range(SLICES)]
    assert store.batch_put_from([k for b in blocks for k in b], payload * 8) == [0] * 8 * SLICES
    eventually(stored_run(index, tokens, 8))
    gone = next(i for i in range(1, 8) if on[i] != on[0])  # a block on the other shard than block 0's
    store.remove(blocks[gone][1])
    eventually(stored_run(index, tokens, gone))
    publishers = [p for p in call(index, "/status")[1]["publishers"] if p["type"] == "kvstore"]
    assert len(publishers) == 2 and all(p["missed_batches"] == 0 for p in publishers)
