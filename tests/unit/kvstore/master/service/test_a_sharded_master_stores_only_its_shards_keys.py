"""A sharded master refuses a put_start batch that holds a key of another shard (a client with a stale or
wrong shard map), naming the key and both shards, and stores nothing of that batch; its own keys (a
group's members by their group, non-ASCII keys) are placed as before, and a one-shard master takes every
key. The batch check agrees with the clients' per-key rule (kvstore.rpc.shard_keys)."""

from __future__ import annotations

import pytest

from kvstore.blocks import member_key
from kvstore.cluster.shards import shard_of, split_by_shard
from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.shard_keys import first_off_shard, shards_of
from tests.unit.kvstore.master.state_helpers import Clock, MiB, started_items


def _handlers(shard: tuple[int, int]) -> Handlers:
    state = MasterState(MasterConfig.load(shard=shard[0], shards=shard[1]), clock=Clock())
    state.members.register_client("c0", "h0")
    state.members.mount_segment(m.MountSegment("c0", "127.0.0.1:7000", 1, 64 * MiB, "h0", 1 << 20))
    return Handlers(state)


def _keys_of(shard: int, count: int, prefix: str = "k/") -> list[str]:
    keys = (f"{prefix}{i}" for i in range(100 * count))
    return [k for k in keys if shard_of(k, 2) == shard][:count]


def _put_start(handlers: Handlers, keys: list[str]) -> list[m.ItemResult]:
    items = [m.PutItem(k, 4096, i) for i, k in enumerate(keys)]
    return started_items(handlers.put_start(m.PutStart("c0", items, 1, False, 0)))


def test_a_batch_with_another_shards_key_is_refused_whole_naming_both_shards() -> None:
    handlers = _handlers((1, 2))
    own, other = _keys_of(1, 40), _keys_of(0, 1)[0]
    batch = [*own[:20], other, *own[20:]]
    with pytest.raises(InvalidArgumentError) as refused:
        _put_start(handlers, batch)
    said = str(refused.value)
    assert repr(other) in said and "held by shard 0 of 2" in said and "serves shard 1" in said
    assert "nothing of this batch was stored" in said
    assert handlers.exists(m.Exists(keys=batch)) == [False] * len(batch)
    # the same keys without the stray one are this shard's: all placed
    assert all(r.code == 0 and r.value for r in _put_start(handlers, own))


def test_own_keys_of_every_form_are_placed_and_others_refused() -> None:
    handlers = _handlers((0, 2))
    group = next(g for g in (f"grp{i}" for i in range(100)) if shard_of(g, 2) == 0)
    other_group = next(g for g in (f"grp{i}" for i in range(100)) if shard_of(g, 2) == 1)
    members = [member_key(group, i, 6) for i in range(6)]  # routed by the group's name
    wide = _keys_of(0, 10, prefix="ключ/é/")  # non-ASCII: hashed over their UTF-8 bytes
    assert all(r.code == 0 and r.value for r in _put_start(handlers, members + wide))
    with pytest.raises(InvalidArgumentError, match="held by shard 1 of 2"):
        _put_start(handlers, [member_key(other_group, 0, 2)])
    with pytest.raises(InvalidArgumentError, match="held by shard 1 of 2"):
        _put_start(handlers, _keys_of(1, 1, prefix="ключ/é/"))


def test_a_one_shard_master_takes_every_key() -> None:
    handlers = _handlers((0, 1))
    keys = _keys_of(0, 5) + _keys_of(1, 5)
    assert all(r.code == 0 and r.value for r in _put_start(handlers, keys))


def test_the_batch_rule_is_the_clients_rule_key_by_key() -> None:
    keys = [f"k/{i}" for i in range(300)] + [
        "g#1of3",
        "g#0of1025",
        "é/x",
        "\ud800a",
        "a#01of2",
        "x/0x" + "f" * 16,
    ]
    for shards in (2, 3, 7, 256):
        expected = [shard_of(k, shards) for k in keys]
        assert shards_of(keys, shards).tolist() == expected
        parts = split_by_shard(keys, shards)
        assert [shards_of([keys[i] for i in part], shards).tolist() for part in parts] == [
            [s] * len(part) for s, part in enumerate(parts)
        ]
        first = next(i for i, s in enumerate(expected) if s != expected[0])
        assert first_off_shard(keys, expected[0], shards) == first
    assert first_off_shard(keys, 0, 1) == -1 and shards_of([], 4).size == 0
