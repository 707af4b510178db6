"""Node identities: the same settings give the same identity, identical nodes on one host never share
one, and a released identity is taken again by the next node with those settings."""

from __future__ import annotations

from kvstore.config import NodeConfig
from kvstore.node.identity import NodeIdentity


def test_identical_nodes_get_distinct_slots_and_a_restart_takes_the_freed_one() -> None:
    config = NodeConfig.load(segment_size=1 << 20, name="identity-test")
    first, second = NodeIdentity(config, "m:1"), NodeIdentity(config, "m:1")
    try:
        assert first.base == second.base and first.name != second.name
        first.release()  # the first node died
        again = NodeIdentity(config, "m:1")
        assert again.name == first.name
        again.release()
    finally:
        first.release()
        second.release()


def test_settings_that_define_a_node_change_its_identity() -> None:
    a = NodeIdentity(NodeConfig.load(segment_size=1 << 20, disk="/tmp/x-tier"), "m:1")
    b = NodeIdentity(NodeConfig.load(segment_size=1 << 20, disk="/tmp/y-tier"), "m:1")
    try:
        assert a.base != b.base
    finally:
        a.release()
        b.release()
