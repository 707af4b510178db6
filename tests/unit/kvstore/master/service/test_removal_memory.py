"""Removals outlive the master that made them: a kill of a removed object names its tombstone, the node
keeps it (kvstore.node.catalog) and names it first to the next master it mounts with, which then refuses
what it covers and removes again what a node that never heard of the removal named before it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError, ProtocolError
from kvstore.master.service.state import MasterState
from kvstore.node import catalog as catalog_module
from kvstore.node.catalog import SegmentCatalog
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment
from tests.unit.kvstore.master.service.test_node_work import poll, two_nodes
from tests.unit.kvstore.master.service.test_removal_tombstones import mount, records, restarted
from tests.unit.kvstore.master.state_helpers import Clock, MiB, holds_of, make_state, put
from tests.unit.kvstore.node.test_segment_catalog import held


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_removals_kills_name_its_tombstone_and_an_excess_replicas_do_not() -> None:
    handlers = two_nodes(nodes=2)
    state = handlers.state
    state.puts.put_start("c0", "gone", MiB, 7, 2, False)
    state.puts.put_end("c0", "gone")
    state.puts.put_start("c0", "kept", MiB, 8, 2, False)
    state.puts.put_end("c0", "kept")
    gens = [r.gen for r in state.objects["gone"].replicas]
    kept = state.objects["kept"]
    excess = kept.replicas[1]
    state.ledger.drop_replicas("kept", [excess])  # (what the replicator does with one too many)
    state.space.free("kept", excess)
    state.removal.remove("gone")
    orders = [o for c in ("c0", "c1") for o in poll(handlers, c).fences]  # type: ignore[attr-defined]
    by_gen = {g: b for o in orders for g, b in zip(o.gens, o.buried, strict=True)}
    tomb = state.space.fences.tombstones.generation("gone")
    assert tomb >= max(gens) and all(by_gen[g] == tomb for g in gens)
    assert by_gen[excess.gen] == 0


def test_a_node_keeps_the_removals_it_was_told_across_a_restart(tmp_path: Path) -> None:
    memory = np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8)
    path = str(tmp_path / "segment.held")
    catalog = SegmentCatalog(path, b"s" * 32)
    catalog.hold([held(1, s, 10 + s, s * 4096, memory[s * 4096 : (s + 1) * 4096], f"k{s}") for s in range(4)])
    catalog.drop([0, 1, 2, 3], [10, 11, 12, 13], [50, 0, 11, 12])  # k1 lives on; k2's tomb is older
    assert sorted(catalog.removed()) == [("k0", 50)]
    catalog.close()
    again = SegmentCatalog(path, b"s" * 32)
    assert again.removed() == [("k0", 50)] and len(again) == 0
    again.hold([held(2, 5, 60, 0, memory[:4096], "k5")])
    again.drop([5], [60], [70])
    again._rewrite()  # compaction keeps them
    again.close()
    assert sorted(SegmentCatalog(path, b"s" * 32).removed()) == [("k0", 50), ("k5", 70)]
    assert SegmentCatalog(path, b"t" * 32).removed() == []  # not written with this secret: names nothing


def test_a_nodes_removals_lapse_and_are_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    memory = np.zeros(1 << 16, dtype=np.uint8)
    monkeypatch.setattr(catalog_module, "MAX_TOMBS", 3)
    catalog = SegmentCatalog(str(tmp_path / "held"))
    catalog.hold([held(1, s, 10 + s, s * 4096, memory[s * 4096 : (s + 1) * 4096], f"k{s}") for s in range(5)])
    catalog.drop([0, 1, 2, 3, 4], [10, 11, 12, 13, 14], [99] * 5)
    assert sorted(k for k, _ in catalog.removed()) == ["k2", "k3", "k4"]  # the oldest went
    now = catalog_module.time.time()
    monkeypatch.setattr(catalog_module.time, "time", lambda: now + catalog_module.TOMB_SECONDS + 1)
    assert catalog.removed() == []


def test_a_master_told_of_a_removal_refuses_what_it_covers_and_removes_it_again(clock: Clock) -> None:
    """An earlier master removed "a" while the first node held it (its kill named the tombstone) and the
    second node was away. The next master hears the second node first and takes "a" back from it; then
    the first node names the removal: "a" goes again (its kill sent to the second node), and a later
    naming of it is refused. "b", never removed, stays."""
    old = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)])
    for key in ("a", "b"):
        put(old, key, MiB // 4, replicas=2)
    held0, held1 = records(holds_of(old, "c0")), records(holds_of(old, "c1"))
    old.removal.remove("a")
    tomb = old.space.fences.tombstones.generation("a")

    state = restarted(clock)
    assert state.members.restore_segment("n1", mount(state, 1), held1, last=True) == []
    assert sorted(state.objects) == ["a", "b"]
    seg0 = mount(state, 0)
    assert state.members.restore_segment("n0", seg0, [], last=False, removed=[("a", tomb)]) == []
    assert sorted(state.objects) == ["b"]
    assert [k.segment.client_id for k in state.space.fences.take("n1", 10)] == ["n1"]  # its kill
    assert state.members.restore_segment("n0", seg0, [r for r in held0 if r[3] == "b"], last=True) == []
    assert len(state.objects["b"].replicas) == 2
    state.puts.put_start("n0", "mine", MiB // 4, 3, 1, False)  # put through this master
    state.puts.put_end("n0", "mine")
    state.members.register_client("m", "h2")  # a member naming a made-up removal of it
    seg2 = state.members.mount_segment(MountSegment("m", "127.0.0.1:7002", 1, 8 * MiB, "h2", 4096, True))
    state.members.restore_segment("m", seg2, [], last=True, removed=[("mine", state.space.fences.current)])
    assert "mine" in state.objects  # what a node names undoes only what nodes named back
    again = MasterState(MasterConfig.load(), clock=clock)
    again.members.register_client("n1", "h1")
    seg = again.members.mount_segment(MountSegment("n1", "127.0.0.1:7001", 1, 8 * MiB, "h1", 4096, True))
    again.members.restore_segment("n1", seg, [], last=False, removed=[("a", tomb)])
    assert again.members.restore_segment("n1", seg, held1, last=True) == [r[1] for r in held1 if r[3] == "a"]


def test_removals_a_node_names_are_checked() -> None:
    parse = m.RestoreSegment.parse
    base = {"client_id": "n", "segment_id": 1, "records": [], "last": True}
    assert parse({**base, "removed": [["k", 5]]}).removed == [("k", 5)]
    assert parse(base).removed == []
    for bad in ([["k"]], [["k", 0]], [["", 5]], [[5, 5]], [["k", "5"]], [["k", 2**63 + 1]], "k"):
        with pytest.raises(InvalidArgumentError):
            parse({**base, "removed": bad})
    with pytest.raises(InvalidArgumentError):
        parse({**base, "removed": [["k", 5]] * (m.FENCE_BATCH + 1)})


@pytest.mark.parametrize("order", [[1, [9], [0], [5]], [1, [9], [0], [5], [0, 0]], [1, [9], [0], [5], ["7"]]])
def test_a_node_refuses_a_malformed_fence_order(order: list[object]) -> None:
    good = [1, [9], [0], [5], [7]]
    assert m.AwaitWork.decode_reply([0, [good], [], [], [], [], []]).fences == [
        m.FenceOrder(1, [9], [0], [5], [7])
    ]
    with pytest.raises(ProtocolError, match="malformed FenceOrder"):
        m.AwaitWork.decode_reply([0, [good, order], [], [], [], [], []])


def test_a_removal_named_at_or_above_this_masters_generations_is_not_taken(clock: Clock) -> None:
    """No earlier master handed out such a generation (or its clock ran ahead): taken, it would cover
    every object this master puts, so that a node (a member's, at will) could have them refused or
    removed after the next restart. It is dropped; one below is kept apart from this master's own."""
    state = restarted(clock)
    fences = state.space.fences
    seg = mount(state, 0)
    state.members.restore_segment(
        "n0", seg, [], last=False, removed=[("k", fences.first + 10**12), ("old", 5)]
    )
    state.members.mount_segment(MountSegment("n1", "127.0.0.1:7001", 1, 8 * MiB, "h1", 4096))
    placed = state.puts.put_start("n1", "k", MiB // 4, 5, 1, False)
    assert placed is not None and not fences.tombstones.covers("k", placed[0].gen)
    assert fences.tombstones.covers("old", 5) and fences.tombstones.stats()["tombstones_named"] == 1
    state.puts.put_end("n1", "k")
    state.removal.remove("k")  # this master's own removals are kept apart from those nodes name
    assert fences.tombstones.stats()["tombstones"] == 1 and fences.tombstones.covers("k", placed[0].gen)


def test_an_object_removed_again_while_its_segment_is_restored_leaves_the_rest_in_order(clock: Clock) -> None:
    """The late node names "a" in its first chunk, the other node names the removal before the late
    node's restore ends: "a" goes, and the rest is evicted in order once both restores end."""
    old = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)])
    for key in ("a", "b", "c"):
        put(old, key, MiB // 4, replicas=2)
    held0, held1 = records(holds_of(old, "c0")), records(holds_of(old, "c1"))
    old.removal.remove("a")
    tomb = old.space.fences.tombstones.generation("a")
    state = restarted(clock)
    seg1 = mount(state, 1)
    assert state.members.restore_segment("n1", seg1, held1, last=False) == []
    seg0 = mount(state, 0)
    assert state.members.restore_segment("n0", seg0, [], last=False, removed=[("a", tomb)]) == []
    assert sorted(state.objects) == ["b", "c"]
    assert state.members.restore_segment("n1", seg1, [], last=True) == []
    assert state.members.restore_segment("n0", seg0, [r for r in held0 if r[3] != "a"], last=True) == []
    assert list(state.policy.candidates()) == ["b", "c"]
    assert all(len(state.objects[k].replicas) == 2 for k in ("b", "c"))
