"""A node of a cluster split over shards joins each shard as a member of its own, named after the node
with a '-shard-<i>' suffix: a name that the suffix takes past the node-name rule (64 characters) is refused
with a clear error at start, not sent to a master that would refuse it per shard."""

from __future__ import annotations

import pytest

from kvstore.config import NodeConfig
from kvstore.errors import InvalidArgumentError
from kvstore.node.process import _shard_node


def test_each_part_is_named_after_the_node_with_its_shard() -> None:
    node = NodeConfig(name="rack1-host7", segment_size=64 << 20)
    parts = [_shard_node(node, i, 2) for i in range(2)]
    assert [p.name for p in parts] == ["rack1-host7-shard-0", "rack1-host7-shard-1"]
    assert all(p.segment_size == 32 << 20 for p in parts)


def test_a_name_the_suffix_takes_past_64_characters_is_refused() -> None:
    node = NodeConfig(name="n" * 57, segment_size=64 << 20)  # 57 + len("-shard-0") = 65
    with pytest.raises(InvalidArgumentError, match="too long to split over 2 shards"):
        _shard_node(node, 0, 2)
    assert _shard_node(NodeConfig(name="n" * 56, segment_size=64 << 20), 1, 2).name.endswith("-shard-1")


def test_one_shard_keeps_the_node_as_it_is() -> None:
    node = NodeConfig(name="n" * 64, segment_size=64 << 20)
    assert _shard_node(node, 0, 1) is node
