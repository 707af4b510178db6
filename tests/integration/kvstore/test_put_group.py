"""Store.put_group: every member of a store group put from one process, seen whole by readers, removed
as one through any member."""

from __future__ import annotations

from kvstore import Store
from kvstore.blocks import group_keys, member_key

from .conftest import Cluster


def test_a_group_put_from_one_process_is_seen_whole_and_removed_as_one(cluster: Cluster) -> None:
    values = [bytes([i]) * (4096 + i) for i in range(3)]
    with Store.connect(cluster.master) as store:
        keys = group_keys("blk", 3)
        store.put(member_key("blk", 0, 3), values[0])  # one member alone: not seen
        assert store.batch_exists(keys) == [False] * 3 and store.get(keys[0]) is None
        assert store.put_group("blk", values) == [0, 0, 0]  # (member 0: already stored, same bytes)
        assert store.batch_exists(keys) == [True] * 3
        assert store.match_prefix(keys).matched == 3
        assert store.batch_get(keys) == values
        store.remove(keys[2], force=True)
        assert store.batch_exists(keys) == [False] * 3 and store.match_prefix(keys).matched == 0
