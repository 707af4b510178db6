"""A sharded client's match_prefix spans the shards a chain routes to (before: refused): each shard is
asked once for its own keys in chain order, the match ends at the first key absent on any shard, the
replicas are each key's own shard's, and each segment's run counts the leading keys it holds under its
own name (a node is a member of each shard under a name per shard)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_sharded_get_blocks_asks_each_shard_once import count_lookups


@pytest.fixture
def store() -> Iterator[ShardedStore]:
    with ExitStack() as stack:
        masters = []
        for shard in range(2):
            _, ready = stack.enter_context(
                kvstore_process(["master", "--port", "0", "--shard", str(shard), "--shards", "2"])
            )
            masters.append(ready.split()[0])
        node = ["node", "--master", ";".join(masters), "--segment-size", "64MiB"]
        stack.enter_context(kvstore_process(node))
        client = stack.enter_context(Store.connect(";".join(masters)))
        assert isinstance(client, ShardedStore)
        for part in client.stores:
            wait_for_mounts(part, 1)
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
