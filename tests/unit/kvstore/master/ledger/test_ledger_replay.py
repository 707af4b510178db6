"""The ledger is the whole log: every record it emits, replayed in order into an empty ledger, makes the
same tables — objects with their replicas and disk records, the space and fence slots taken in every
segment of every tier, the restore state, and the kills not yet acknowledged (which keys are fencing,
how much space is held for late writers). A journal or a standby needs nothing else."""

from __future__ import annotations

import typing
from typing import Any

from kvstore.allocator import OffsetAllocator
from kvstore.config import MasterConfig
from kvstore.master.ledger import changes as c
from kvstore.master.ledger.fences import FenceBook
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import DiskSegment, Segment
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """Keeps every record the ledger emits, in order. A mounted segment is kept as it was mounted (what
    a journal would write down: its own object goes on changing), and each replay mounts a fresh copy."""

    def __init__(self, ledger: Ledger) -> None:
        self.records: list[Any] = []
        for kind in typing.get_args(c.Record):
            ledger.watch(kind, self.records.extend if kind is not c.SegmentMounted else self._mounted)

    def _mounted(self, records: list[c.SegmentMounted]) -> None:
        self.records += [_Mount(_as_mounted(r.segment)) for r in records]


class _Mount(typing.NamedTuple):
    """A SegmentMounted as recorded: the segment as it was then, never applied itself."""

    template: Segment | DiskSegment


def _as_mounted(seg: Segment | DiskSegment) -> Segment | DiskSegment:
    allocator = OffsetAllocator(seg.size, seg.allocator.alignment)
    if isinstance(seg, DiskSegment):
        return DiskSegment(seg.id, seg.client_id, seg.host_id, seg.size, allocator, restoring=seg.restoring)
    restoring = None if seg.restoring is None else set(seg.restoring)
    return Segment(
        seg.id, seg.client_id, seg.engine, seg.region_id, seg.size, seg.host_id, allocator, seg.fence_slots,
        restoring=restoring,
    )  # fmt: skip


def _replayed(records: list[Any], clock: Clock) -> Ledger:
    ledger = Ledger(FenceBook(clock, lambda client_id: None))
    for record in records:
        if type(record) is _Mount:
            record = c.SegmentMounted(_as_mounted(record.template))
        ledger.apply([record])
    return ledger


def tables(ledger: Ledger) -> dict[str, Any]:
    objects = {}
    for meta in ledger.objects.values():
        replicas = sorted((r.segment.id, r.offset, r.slot, r.gen) for r in meta.replicas)
        disk = None if meta.disk is None else (meta.disk.segment.id, meta.disk.offset)
        row = (meta.size, meta.checksum, meta.complete, meta.pinned, replicas, disk, meta.target_replicas)
        objects[meta.key] = row
    memory = {
        seg.id: (
            seg.allocator.stats(),
            seg.allocations,
            seg.slots.next,
            sorted(seg.slots.free_slots),
            None if seg.restoring is None else sorted(seg.restoring),
            seg.placeable,
            seg.suspect_since,
        )
        for seg in ledger.segments.values()
    }
    disks = {
        seg.id: (seg.allocator.stats(), seg.allocations, seg.restoring, seg.degraded)
        for seg in ledger.disks.values()
    }
    fences = ledger.fences
    kills = sorted(
        (k.segment.id, k.slot, k.gen, k.held_offset, k.until, k.buried) for k in fences.unacknowledged()
    )
    return {
        "objects": objects,
        "stored_bytes": ledger.stored_bytes,
        "memory": memory,
        "disks": disks,
        "kills": kills,
        "fencing": fences.fencing_keys(),
        "held_bytes": fences.held_bytes,
        "tombstones": (fences.tombstones.entries(), fences.tombstones.floor),
    }


def fence(state: MasterState, client: str) -> None:
    """Plays the node of `client`: takes its kills and acknowledges them."""
    ids = [k.id for k in state.ledger.fences.take(client, 1 << 20)]
    state.ledger.acknowledge(client, ids)


def _agrees(state: MasterState, recorder: Recorder, clock: Clock) -> dict[str, Any]:
    replayed = _replayed(recorder.records, clock)
    for ledger in (state.ledger, replayed):  # (fencing and tombstones lapse by the clock, not by a record)
        ledger.lapse_fences()
        ledger.fences.tombstones.lapse(clock(), lambda: False)
    live = tables(state.ledger)
    assert tables(replayed) == live
    return live


def test_a_run_of_puts_evictions_removals_and_fences_replays_into_the_same_tables() -> None:
    clock = Clock()
    state = MasterState(MasterConfig.load(lease_ttl=5.0), clock=clock)
    # the run below is written for these placement draws (they put "abandoned" on c0)
    state.ledger.memory.seed(0x6B76_7374_6F72_6521)
    recorder = Recorder(state.ledger)
    for i in range(2):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 8 * MiB, f"h{i}", 1 << 20)
        )
    for i in range(12):  # fills both segments and evicts: 12 x 2 x 1 MiB into 16 MiB
        state.puts.put_start("c0", f"k{i}", MiB, i, 2 if i % 3 == 0 else 1, False)
        state.puts.put_end("c0", f"k{i}")
    state.puts.put_start("c0", "abandoned", MiB // 2, 1, 1, False)
    state.puts.put_revoke("c0", "abandoned")  # its writer may be late: the space stays held until the kill
    state.access.change_replica("k3", 2)  # a user's count (ReplicaTargetSet)
    state.access.get_replicas("k11")  # leased: its removal leaves it fencing
    state.removal.remove("k11", force=True)
    state.removal.remove("k10")
    live = _agrees(state, recorder, clock)
    assert live["kills"] and live["fencing"] == {"k11"} and live["held_bytes"] > 0
    assert set(live["tombstones"][0]["removed"]) == {"k10", "k11"}  # (ObjectsBuried)
    assert live["objects"]["k3"][-1] == 2
    fence(state, "c0")
    live = _agrees(state, recorder, clock)
    assert live["held_bytes"] == 0 and live["kills"]  # c1's kills are still out
    fence(state, "c1")
    suspected = next(seg for seg in state.ledger.segments.values() if seg.client_id == "c1")
    state.space.suspect(suspected, clock.now)  # a client could not reach it (SegmentSuspected)
    assert _agrees(state, recorder, clock)["memory"][suspected.id][-1] == clock.now
    state.space.trust(suspected)
    clock.now += 10
    state.expire()
    meta = state.ledger.objects["k9"]
    where = meta.replicas[0]
    state.removal.report_corrupt(
        "k9", where.segment.engine, where.segment.region_id, where.offset, meta.checksum
    )
    for i in range(3):
        state.puts.put_start("c0", f"after{i}", 2 * MiB, i, 1, False)  # reuses acknowledged slots
        state.puts.put_end("c0", f"after{i}")
    _agrees(state, recorder, clock)
    state.members.drop_client("c1")
    fence(state, "c0")
    live = _agrees(state, recorder, clock)
    assert len(live["memory"]) == 1 and live["objects"]
    assert live["tombstones"][0]["lost"]  # what went with c1's segment (ObjectsLost)


def test_a_run_through_the_disk_tier_replays_into_the_same_tables() -> None:
    """Demotions, a load back to memory, evictions to disk, a failed demotion (its late write holds the
    space, then releases it) and removals."""
    clock = Clock()
    state = MasterState(MasterConfig.load(lease_ttl=1.0, demote_watermark=0.5), clock=clock)
    recorder = Recorder(state.ledger)
    state.members.register_client("c0", "h0")
    state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 1 << 20))
    state.disk.disk_space.mount("c0", "h0", 32 * MiB, "/nvme/tier")
    for i in range(14):
        state.puts.put_start("c0", f"k{i}", MiB, i, 1, False)
        state.puts.put_end("c0", f"k{i}")
        orders = state.disk.take("c0")
        state.disk.complete("c0", [m.DiskResult(o.order, i != 9) for o in orders])  # one batch fails
    assert state.counters.evictions_to_disk > 0
    cold = next(meta for meta in state.ledger.objects.values() if not meta.replicas)
    assert state.disk.load(cold, lambda: None)
    state.disk.complete("c0", [m.DiskResult(o.order, True) for o in state.disk.take("c0")])
    state.removal.remove("k12", force=True)
    state.removal.remove(cold.key, force=True)
    fence(state, "c0")
    state.disk.set_degraded("c0", "writes fail")  # (DiskDegraded)
    assert [row[-1] for row in _agrees(state, recorder, clock)["disks"].values()] == ["writes fail"]
    state.disk.set_degraded("c0", "")
    late = []  # demotions whose node never answers: their records' space is held for a late write
    for i in range(14, 18):
        state.puts.put_start("c0", f"k{i}", MiB, i, 1, False)
        state.puts.put_end("c0", f"k{i}")
        late += state.disk.take("c0")
    clock.now += state.config.disk_task_timeout + 1
    state.members.heartbeat("c0")
    state.expire()
    live = _agrees(state, recorder, clock)
    assert late and any(row[5] for row in live["objects"].values())  # (disk records)
    state.disk.complete("c0", [m.DiskResult(o.order, True) for o in late])  # too late: space released
    _agrees(state, recorder, clock)
    assert any(type(r) is c.SpaceReleased for r in recorder.records)


def test_a_restore_replays_into_the_same_tables() -> None:
    """A restarted master's node mounts its segment restoring and names back what it holds: the objects
    adopted, the space and slots taken back (one refused), the restore's end, and puts after it."""
    clock = Clock()
    old = MasterState(MasterConfig.load(), clock=clock)
    old.members.register_client("c0", "h0")
    old.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 1 << 20))
    for key in ("a", "b", "c"):
        old.puts.put_start("c0", key, MiB // 2, 7, 1, False)
        old.puts.put_end("c0", key)
    held = [
        (r.offset, r.slot, r.gen, key, MiB // 2, 7, False, 1)
        for key in ("a", "b", "c")
        for r in old.ledger.objects[key].replicas
    ]
    state = MasterState(MasterConfig.load(), clock=clock)
    recorder = Recorder(state.ledger)
    state.members.register_client("n", "h0")
    seg = state.members.mount_segment(
        MountSegment("n", "127.0.0.1:7000", 1, 8 * MiB, "h0", 4096, restoring=True)
    )
    conflicting = (held[0][0], held[0][1] + 100, held[0][2], "d", MiB // 2, 1, False, 1)  # space taken
    assert state.members.restore_segment("n", seg, [*held, conflicting], last=True) == [conflicting[1]]
    live = _agrees(state, recorder, clock)
    assert sorted(live["objects"]) == ["a", "b", "c"]
    state.puts.put_start("n", "after", MiB, 1, 1, False)
    state.puts.put_end("n", "after")
    state.removal.remove("b", force=True)
    fence(state, "n")
    _agrees(state, recorder, clock)


def test_a_record_that_does_not_fit_the_replayed_tables_is_refused() -> None:
    """Space named twice (a journal out of order or spoiled) is an error, not a second owner."""
    clock = Clock()
    state = MasterState(MasterConfig.load(), clock=clock)
    recorder = Recorder(state.ledger)
    state.members.register_client("c0", "h0")
    state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 1 << 20))
    state.puts.put_start("c0", "k", MiB, 1, 1, False)
    taken = next(r for r in recorder.records if type(r) is c.SpaceTaken)
    ledger = _replayed(recorder.records, clock)
    try:
        ledger.apply([taken])
    except ValueError as e:
        assert "not free" in str(e)
    else:
        raise AssertionError("the same space was taken twice")
