"""The memory tier's counts are the ledger's: the bytes and fence slots of the mounted segments and how
many are suspected unreachable are kept by its segment appliers, so a SegmentSpace over a ledger that was
only replayed the records (a journal, a standby) answers as the live one does. A record naming a segment
the ledger does not hold (gone since) changes nothing, least of all the record's own segment object."""

from __future__ import annotations

from kvstore.allocator import OffsetAllocator
from kvstore.config import MasterConfig
from kvstore.master.ledger import changes as c
from kvstore.master.ledger.fences import FenceBook
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import DiskSegment, Segment
from kvstore.master.ledger.node_polls import NodePolls
from kvstore.master.ledger.objects import MEMORY_ORDER, TableOrder
from kvstore.master.planners.eviction import make_policy
from kvstore.master.planners.placement import SegmentSpace
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import MountSegment
from tests.unit.kvstore.master.ledger.test_ledger_replay import Clock, Recorder, _replayed

MiB = 1 << 20


def _space_over(ledger: Ledger, clock: Clock) -> SegmentSpace:
    """The memory tier as a master that took over with this ledger would build it."""
    policy = make_policy("lru", TableOrder(ledger.objects, MEMORY_ORDER))
    return SegmentSpace(4096, clock, ledger, NodePolls(), policy)


def _counts(space: SegmentSpace) -> dict[str, object]:
    suspected = sum(1 for seg in space if not seg.usable)
    return {
        "capacity": space.capacity,
        "fence_slots": space.fence_slots,
        "any_suspect": space.any_suspect(),
        "suspects": suspected,
        "suspects_counted": space.ledger.suspects if hasattr(space.ledger, "suspects") else None,
    }


def _agrees(state: MasterState, recorder: Recorder, clock: Clock) -> dict[str, object]:
    live = _counts(state.space)
    assert _counts(_space_over(_replayed(recorder.records, clock), clock)) == live
    assert live["suspects_counted"] == live["suspects"]  # (the count is the table's)
    return live


def test_capacity_fence_slots_and_suspects_replay_into_the_same_counts() -> None:
    clock = Clock()
    state = MasterState(MasterConfig.load(), clock=clock)
    recorder = Recorder(state.ledger)
    for i in range(3):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, (4 + i) * MiB, f"h{i}", 64 << i)
        )
    live = _agrees(state, recorder, clock)
    assert live["capacity"] == 15 * MiB and live["fence_slots"] == 64 + 128 + 256 and not live["any_suspect"]
    segments = {seg.client_id: seg for seg in state.space}
    assert state.space.suspect(segments["c1"], clock.now)
    assert state.space.suspect(segments["c2"], clock.now + 1)
    assert not state.space.suspect(segments["c2"], clock.now + 2)  # (already: counted once)
    assert _agrees(state, recorder, clock)["suspects"] == 2
    state.space.trust(segments["c1"])
    state.space.trust(segments["c1"])  # (already trusted: nothing)
    assert _agrees(state, recorder, clock)["suspects"] == 1
    state.members.drop_client("c2")  # its suspected segment goes
    live = _agrees(state, recorder, clock)
    assert live == {
        "capacity": 9 * MiB,
        "fence_slots": 64 + 128,
        "any_suspect": False,
        "suspects": 0,
        "suspects_counted": 0,
    }


def test_a_suspected_segment_dropped_leaves_no_suspect_behind() -> None:
    """Replayed records need not trust a segment before it goes (a journal may end a segment that way)."""
    clock = Clock()
    ledger = Ledger(FenceBook(clock, lambda client_id: None))
    seg = Segment(1, "c0", "127.0.0.1:7000", 1, MiB, "h0", OffsetAllocator(MiB, 4096), 16)
    ledger.apply([c.SegmentMounted(seg), c.SegmentSuspected(seg, 5.0)])
    assert (ledger.suspects, ledger.memory_capacity, ledger.memory_fence_slots) == (1, MiB, 16)
    ledger.apply([c.SegmentDropped(seg)])
    assert (ledger.suspects, ledger.memory_capacity, ledger.memory_fence_slots) == (0, 0, 0)


def test_records_for_a_segment_the_ledger_does_not_hold_change_nothing() -> None:
    """Health and restore records of a segment that is not this ledger's (gone, or another ledger's) are
    ignored by rule: neither this ledger's counts nor the record's own segment object change."""
    clock = Clock()
    ledger = Ledger(FenceBook(clock, lambda client_id: None))
    mounted = Segment(1, "c0", "127.0.0.1:7000", 1, MiB, "h0", OffsetAllocator(MiB, 4096), 16)
    ledger.apply([c.SegmentMounted(mounted)])
    foreign = Segment(2, "c1", "127.0.0.1:7001", 1, MiB, "h1", OffsetAllocator(MiB, 4096), 16, restoring={3})
    disk = DiskSegment(1, "c1", "h1", 8 * MiB, OffsetAllocator(8 * MiB, 4096), restoring=True)
    ledger.apply([c.SegmentSuspected(foreign, 7.0), c.DiskDegraded(disk, "EIO"), c.RestoreEnded(foreign)])
    ledger.apply([c.RestoreEnded(disk)])
    assert foreign.suspect_since == 0.0 and foreign.restoring == {3}
    assert disk.degraded == "" and disk.restoring
    assert ledger.suspects == 0 and mounted.usable and list(ledger.segments) == [1] and not ledger.disks


def test_a_segment_suspected_after_it_went_is_not_counted() -> None:
    """A report judged after its segment was unmounted suspects nothing (it was counted before, for
    good: every later read took the slow path)."""
    clock = Clock()
    state = MasterState(MasterConfig.load(), clock=clock)
    state.members.register_client("c0", "h0")
    seg = state.space.segments[
        state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 4 * MiB, "h0", 1 << 20))
    ]
    state.space.unmount(seg)
    assert not state.space.suspect(seg, clock.now)
    assert not state.space.any_suspect() and seg.usable
