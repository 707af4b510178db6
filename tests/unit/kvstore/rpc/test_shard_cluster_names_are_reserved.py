"""A shard elects under "<cluster>.shard-<i>" (kvstore.rpc.etcd.shard_cluster): no cluster of its own may
take such a name (it would share a sharded cluster's leader and candidate keys in etcd), and a base name
too long for its shards' names is refused when split, saying why (review: naming notes)."""

from __future__ import annotations

import pytest

from kvstore.config import StoreConfig
from kvstore.config.master import MasterConfig
from kvstore.errors import InvalidArgumentError
from kvstore.rpc import etcd


@pytest.mark.parametrize("name", ["c.shard-0", "a.shard-x", "x.shard-"])
def test_a_cluster_may_not_take_a_shards_name(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"may not hold '\.shard-'"):
        StoreConfig.load({}, etcd="127.0.0.1:2379", cluster=name)
    with pytest.raises(InvalidArgumentError, match=r"may not hold '\.shard-'"):
        MasterConfig.load({}, etcd="127.0.0.1:2379", cluster=name)


def test_the_shards_own_names_are_taken_where_a_shard_elects_and_is_looked_up() -> None:
    name = etcd.shard_cluster("c", 1, 2)
    assert name == "c.shard-1"
    assert etcd.check_cluster(name, shard_of_one=True) == name
    assert etcd.check_cluster("c.shards_of_a_kind") == "c.shards_of_a_kind"  # (only the infix is held)


def test_a_name_too_long_for_its_shards_is_refused_when_split() -> None:
    base = "x" * 120
    assert etcd.shard_cluster(base, 1, 2) == base + ".shard-1"  # (128 characters: the most)
    with pytest.raises(InvalidArgumentError, match=r"too long to split over shards: .*128 characters"):
        etcd.shard_cluster(base, 10, 11)
    assert etcd.shard_cluster(base, 0, 1) == base  # (one shard is the cluster itself)
