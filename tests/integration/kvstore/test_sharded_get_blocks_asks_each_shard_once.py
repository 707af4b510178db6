"""A sharded client's get_blocks asks each shard's master once (a prefix lookup that also leases what it
finds), where it asked twice before (exists, then the gets' lookup): the leading run of stored blocks over
both shards loads byte-exact, nothing after the first absent block (on either shard) is fetched or lands
in its buffer, and a second call is served from the leases without asking any master."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from tests.integration.kvstore.conftest import two_shard_store

BLOCK = 8192


@pytest.fixture
def store() -> Iterator[ShardedStore]:
    with two_shard_store() as client:
        yield client


def count_lookups(store: ShardedStore) -> list[Counter[str]]:
    """Per shard, the requests its master is sent from here on, by kind (the real calls, counted)."""
    counts: list[Counter[str]] = []
    for part in store.stores:
        seen: Counter[str] = Counter()
        real = part.session.master.call

        def call(request: Any, *args: Any, _real: Any = real, _seen: Counter[str] = seen, **kw: Any) -> Any:
            _seen[type(request).__name__] += 1
            return _real(request, *args, **kw)

        part.session.master.call = call  # type: ignore[method-assign]
        counts.append(seen)
    return counts


def block(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 256, BLOCK, dtype=np.uint8).tobytes()


def test_get_blocks_looks_each_shard_up_once_and_stops_at_the_first_absent_block(store: ShardedStore) -> None:
    keys = [f"chain/{i}" for i in range(24)]
    assert {shard_of(k, 2) for k in keys[:7]} == {0, 1}
    assert store.put_blocks(keys, [block(i) for i in range(24)]) == [0] * 24
    for part in store.stores:
        part.leases.clear()
    counts = count_lookups(store)
    buffers = [bytearray(BLOCK) for _ in keys]
    assert store.get_blocks(keys, buffers) == 24
    assert [bytes(b) for b in buffers] == [block(i) for i in range(24)]
    assert [c["GetReplicas"] for c in counts] == [1, 1] and sum(c["Exists"] for c in counts) == 0

    store.remove(keys[7], force=True)  # block 7 absent: 0..6 load, nothing after is fetched
    for part in store.stores:
        part.leases.clear()
    for c in counts:
        c.clear()
    buffers = [bytearray(BLOCK) for _ in keys]
    assert store.get_blocks(keys, buffers) == 7
    assert [bytes(b) for b in buffers[:7]] == [block(i) for i in range(7)]
    assert all(b == bytearray(BLOCK) for b in buffers[7:])
    assert [c["GetReplicas"] for c in counts] == [1, 1]

    for c in counts:
        c.clear()
    assert store.get_blocks(keys[:7], [bytearray(BLOCK) for _ in range(7)]) == 7  # leased: no lookup
    assert sum(sum(c.values()) for c in counts) == 0
    assert store.get_blocks(["absent/0", *keys[:3]], [bytearray(BLOCK) for _ in range(4)]) == 0
