"""A key's shard is a pure function every client agrees on: the unseeded xxh3-64 of its UTF-8 bytes mod
S (kvstore.cluster.shards), a store group's member by its group's name; a batch splits
into the positions each shard holds, in key order; the static and etcd shard settings name each
shard's master as kvstore.rpc.etcd says."""

from __future__ import annotations

import pytest
import xxhash

from kvstore.blocks import member_key, seq_key
from kvstore.cluster.shards import shard_configs, shard_of, split_by_shard, split_shards
from kvstore.config import StoreConfig
from kvstore.errors import InvalidArgumentError
from kvstore.rpc import etcd


def test_the_shard_is_unseeded_xxh3_of_the_key_mod_the_count() -> None:
    # Pinned values: a change of the rule would send every client's keys to other masters.
    assert xxhash.xxh3_64_intdigest(b"") == 0x2D06800538D394C2
    keys = ["a", "block/0x00000000000000ff", "grp#0of4", "ü-key", "kvstore"]
    assert [shard_of(k, 7) for k in keys] == [1, 3, 0, 2, 2]
    for key in ["a", "block/0x00000000000000ff", "not#a-member", "ü-key"]:
        for shards in (1, 2, 3, 8, 256):
            assert shard_of(key, shards) == xxhash.xxh3_64_intdigest(key.encode()) % shards
    assert shard_of("anything", 1) == 0


def test_a_groups_members_live_on_its_groups_shard() -> None:
    for group in [f"g{i}" for i in range(50)] + [seq_key("ns", 0xABC)]:
        home = xxhash.xxh3_64_intdigest(group.encode()) % 5
        assert {shard_of(member_key(group, i, 6), 5) for i in range(6)} == {home}
    # a key that only looks like a member (index not below count) is routed by itself
    assert shard_of("g#7of4", 5) == xxhash.xxh3_64_intdigest(b"g#7of4") % 5
    # The member form's bounds are part of the rule (kvstore.blocks.MAX_GROUP_MEMBERS, _MEMBER): pinned,
    # since changing them reroutes stored keys. g (0 of 5) holds its members up to 1,024; past that, or
    # with a leading zero, a key routes by itself (3 and 4 of 5).
    assert [shard_of(k, 5) for k in ["g#1023of1024", "g#0of1025", "g#01of2"]] == [0, 3, 4]


def test_keys_spread_over_every_shard_and_a_batch_splits_in_key_order() -> None:
    keys = [seq_key("ns", i * 0x9E3779B97F4A7C15 % (1 << 64)) for i in range(2000)]
    keys += [member_key("group", i, 8) for i in range(8)]
    parts = split_by_shard(keys, 4)
    assert sorted(i for part in parts for i in part) == list(range(len(keys)))
    for shard, part in enumerate(parts):
        assert part == sorted(part) and all(shard_of(keys[i], 4) == shard for i in part)
        assert 400 < len(part) < 600  # (2008 keys over 4 shards)


def test_a_static_list_names_each_shard_in_order() -> None:
    assert split_shards("h:1") == ["h:1"]
    assert split_shards("h:1,h:2;h:3,h:4") == ["h:1,h:2", "h:3,h:4"]
    with pytest.raises(InvalidArgumentError, match="empty shard"):
        split_shards("h:1;;h:3")
    with pytest.raises(InvalidArgumentError):
        split_shards(";".join(["h:1"] * 257))
    one = StoreConfig.load(master="127.0.0.1:1")
    assert shard_configs(one) == [one]  # one shard: today's settings, the same object
    two = shard_configs(StoreConfig.load(master="127.0.0.1:1,127.0.0.1:2;127.0.0.1:3"))
    assert [c.master for c in two] == ["127.0.0.1:1,127.0.0.1:2", "127.0.0.1:3"]
    with pytest.raises(InvalidArgumentError):
        StoreConfig.load(master="127.0.0.1:1;nohost")


def test_each_shard_elects_under_its_own_name_in_etcd() -> None:
    assert etcd.shard_cluster("c", 0, 1) == "c"  # one shard: today's keys
    assert [etcd.shard_cluster("c", i, 3) for i in range(3)] == ["c.shard-0", "c.shard-1", "c.shard-2"]
    assert etcd.leader_key(etcd.shard_cluster("c", 1, 2)) == "/kvstore/c.shard-1/leader"
    assert etcd.shards_key("c") == "/kvstore/c/shards"
    for shard, shards in [(2, 2), (-1, 2), (0, 0), (0, 257)]:
        with pytest.raises(InvalidArgumentError):
            etcd.shard_cluster("c", shard, shards)
