"""A block held only by the store is a hit, in `kvstore index`, for an instance that never held it (issue 40,
item 3): a real master publishing its KV events, a real index process, blocks put under the connectors'
key scheme (seq_key of the contract's sequence hash and the namespaced digest, as a group of head slices),
and nothing but the master's events between them. A group is credited once all its members are stored;
removing one member, or eviction, takes the credit back."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from kvstore import Store
from kvstore.blocks import BlockHasher, member_key, seq_hashes, seq_key
from kvstore.procs import kvstore_process
from tests.helpers import store_credit as credit
from tests.helpers.kv_event_publisher import Publisher
from tests.helpers.store_credit import call, eventually

BLOCK = 4
SLICES = 2  # head slices per block: a group of two members
MODEL = "tiny-llama"
NAMESPACE = "tiny-llama/kv0"


def block_members(tokens: list[int], index: int) -> list[str]:
    """Block `index`'s member keys under the connectors' scheme."""
    seq = seq_hashes(tokens, BLOCK)[index]
    digest = BlockHasher(BLOCK, NAMESPACE).keys(tokens)[index]
    group = seq_key(NAMESPACE, seq, digest)
    return [member_key(group, s, SLICES) for s in range(SLICES)]


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Store]]:
    """A master with KV events on (oldest evicted first), a 64 MiB node, an index with the store and an
    instance (an engine's publisher that never says a thing) registered; yields (index address, store)."""
    monkeypatch.setenv("KVSTORE_MASTER_EVICTION_POLICY", "lru")
    endpoint = f"ipc://{tmp_path}/store-events"
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(["index", "--port", "0"]))
        index = ready.removeprefix("http://")
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--kv-events-endpoint", endpoint])
        )
        master = ready.split()[0]
        stack.enter_context(kvstore_process(["node", "--master", master, "--segment-size", "64MiB"]))
        engine = Publisher()
        stack.callback(engine.close)
        base = {"modelname": MODEL, "block_size": BLOCK, "dp_rank": 0}
        status, reply = call(index, "/register", {
            **base, "endpoint": engine.endpoint, "replay_endpoint": engine.replay_endpoint, "type": "vLLM",
            "instance_id": "fresh",
        })  # fmt: skip
        assert status == 200, reply
        status, reply = call(index, "/register", {
            **base, "endpoint": endpoint, "type": "kvstore", "instance_id": "store", "namespace": NAMESPACE,
        })  # fmt: skip
        assert status == 200, reply
        store = stack.enter_context(Store.connect(master))
        credit.wait_subscribed(index, store, MODEL, BLOCK, NAMESPACE, "fresh")
        yield index, store


def query(index: str, tokens: list[int]) -> dict[str, Any]:
    return credit.query(index, MODEL, BLOCK, tokens)


def _true(ok: bool) -> None:
    assert ok


def test_a_stored_prefix_is_credited_to_an_instance_that_never_held_it(deployment: tuple[str, Store]) -> None:
    index, store = deployment
    tokens = list(range(1000, 1000 + 6 * BLOCK + 2))  # (six full blocks and a partial one)
    blocks = [block_members(tokens, i) for i in range(6)]
    payload = [bytes([i]) * 4096 for i in range(SLICES)]
    # Blocks 0-3 whole; block 4 only its first head slice (a writer still on its way); block 5 whole.
    keys = [k for b in blocks[:4] for k in b] + blocks[4][:1] + blocks[5]
    assert store.batch_put_from(keys, payload * 4 + payload[:1] + payload) == [0] * len(keys)

    def credit(blocks_expected: int) -> Callable[[], None]:
        def check() -> None:
            rows = query(index, tokens)
            assert list(rows) == ["fresh"], rows  # (the store is no instance of its own)
            n = blocks_expected * BLOCK
            row = {"longest_matched": n, "GPU": 0, "CPU": 0, "DISK": 0, "STORE": n, "DP": {}}
            assert rows["fresh"] == row

        return check

    eventually(credit(4))  # (block 4's group is not complete: the prefix stops there)
    assert store.batch_put_from(blocks[4][1:], payload[1:]) == [0]
    eventually(credit(6))  # (its last member makes block 4 readable, and with it 5)
    by_hash = {"model": MODEL, "block_size": BLOCK, "seq_hashes": seq_hashes(tokens, BLOCK)}
    assert call(index, "/query_by_hash", by_hash)[1]["default"]["fresh"]["longest_matched"] == 6 * BLOCK
    other_model = {"model": "other", "token_ids": tokens, "block_size": BLOCK}
    assert call(index, "/query", other_model)[1] == {"default": {}}
    # Any member of a group gone takes the block's credit back.
    store.remove(blocks[2][1])
    eventually(credit(2))
    # Eviction: filling the pool evicts the oldest objects, the blocks first.
    filler = b"f" * (1 << 20)
    for n in range(200):
        store.batch_put_from([f"filler-{n}"], [filler])
        if query(index, tokens)["fresh"]["longest_matched"] < 2 * BLOCK:
            break
    eventually(lambda: _true(query(index, tokens)["fresh"]["longest_matched"] < 2 * BLOCK))
    assert not all(store.batch_exists([k for b in blocks[:2] for k in b]))
    publisher = next(p for p in call(index, "/status")[1]["publishers"] if p["type"] == "kvstore")
    assert publisher["missed_batches"] == 0 and publisher["bad_batches"] == 0
    assert publisher["namespace"] == NAMESPACE
