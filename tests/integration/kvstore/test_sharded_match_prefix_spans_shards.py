"""A sharded client's match_prefix spans the shards a chain routes to (before: refused): each shard is
asked once for its own keys in chain order, the match ends at the first key absent on any shard, the
replicas are each key's own shard's, and each segment's run counts the leading keys it holds under its
own name (a node is a member of each shard under a name per shard)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from tests.integration.kvstore.conftest import two_shard_store
from tests.integration.kvstore.test_sharded_get_blocks_asks_each_shard_once import count_lookups


@pytest.fixture
def store() -> Iterator[ShardedStore]:
    with two_shard_store() as client:
        yield client


def test_match_prefix_spans_both_shards_and_ends_at_the_first_absent_key(store: ShardedStore) -> None:
    keys = [f"chain/{i}" for i in range(20)]
    on = [shard_of(k, 2) for k in keys]
    assert set(on[:9]) == {0, 1}
    assert store.put_blocks(keys, [bytes([i]) * 4096 for i in range(20)]) == [0] * 20
    counts = count_lookups(store)
    match = store.match_prefix([*keys, "chain/absent"])
    assert match.matched == 20 and [c["MatchPrefix"] for c in counts] == [1, 1]
    # one segment a shard holds every key of (the node's part there), named as its shard names it
    names = [copies[0] for copies in match.replicas]
    assert all(len(copies) == 1 for copies in match.replicas)
    assert len(set(names)) == 2 and all(names[i] == names[on.index(on[i])] for i in range(20))
    first_other = on.index(1 - on[0])
    assert match.per_node == {names[0]: first_other, names[first_other]: 0}

    store.remove(keys[9], force=True)
    match = store.match_prefix(keys)
    assert match.matched == 9 and [c[0] for c in match.replicas] == names[:9]
    assert store.match_prefix(["chain/absent", *keys]) == (0, [], {})
    assert store.match_prefix([]) == (0, [], {})
    assert store.batch_get([]) == [] and store.batch_exists([]) == []  # (no keys: no shard asked)
