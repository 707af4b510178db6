"""The ledger's records tell every change: a listener that sees only them (a journal, a standby) knows
which objects exist and which space and fence slots are taken in every segment, as the master does."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kvstore.config import MasterConfig
from kvstore.master.ledger import changes as c
from kvstore.master.ledger.model import DiskReplica, Replica
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment
from tests.unit.kvstore.master.state_helpers import Clock, MiB, fence


class Journal:
    """Replays the records it is shown into its own tables (what a standby would keep)."""

    def __init__(self) -> None:
        self.objects: set[str] = set()
        self.committed: set[str] = set()
        self.space: dict[int, set[int]] = defaultdict(set)  # memory segment -> offsets taken
        self.slots: dict[int, set[int]] = defaultdict(set)  # memory segment -> fence slots in use
        self.disk: dict[int, set[int]] = defaultdict(set)  # disk segment -> record offsets taken

    def see(self, records: list[Any]) -> None:
        for r in records:
            kind = type(r)
            if kind is c.PutsStarted:
                self.objects.update(r.keys)
            elif kind is c.ObjectRestored:
                self.objects.update(meta.key for meta in r.metas)
                self.committed.update(meta.key for meta in r.metas)
            elif kind is c.ObjectsAdopted:
                self.objects.update(record[3] for record in r.records)
                self.committed.update(record[3] for record in r.records)
            elif kind is c.PutsCommitted:
                self.committed.update(r.keys)
            elif kind is c.ObjectDropped:
                self.objects.discard(r.key)
                self.committed.discard(r.key)
            elif kind is c.SpaceTaken:
                if isinstance(r.replica, Replica):
                    self.space[r.replica.segment.id].add(r.replica.offset)
                    self.slots[r.replica.segment.id].add(r.replica.slot)
                else:
                    self.disk[r.replica.segment.id].add(r.replica.offset)
            elif kind is c.SpaceFreed:
                if isinstance(r.replica, DiskReplica):
                    if not r.held:
                        self.disk[r.replica.segment.id].discard(r.replica.offset)
                elif not r.held:
                    self.space[r.replica.segment.id].discard(r.replica.offset)
            elif kind is c.SpaceReleased:
                self.disk[r.replica.segment.id].discard(r.replica.offset)
            elif kind is c.FencesAcknowledged:
                for k in r.kills:
                    self.slots[k.segment.id].discard(k.slot)
                    if k.held_offset is not None:
                        self.space[k.segment.id].discard(k.held_offset)


def _watched(state: MasterState) -> Journal:
    journal = Journal()
    for kind in (
        c.PutsStarted,
        c.PutsCommitted,
        c.ObjectDropped,
        c.ObjectRestored,
        c.ObjectsAdopted,
        c.SpaceTaken,
        c.SpaceFreed,
        c.SpaceReleased,
        c.FencesAcknowledged,
    ):
        state.ledger.watch(kind, journal.see)
    return journal


def _agrees(state: MasterState, journal: Journal) -> None:
    assert journal.objects == set(state.objects)
    assert journal.committed == {k for k, m in state.objects.items() if m.complete}
    for seg in state.space.segments.values():
        offsets = journal.space[seg.id]
        assert all(seg.allocator.block_size(o) > 0 for o in offsets)
        assert sum(seg.allocator.block_size(o) for o in offsets) == seg.allocator.used
        in_use = set(range(seg.slots.next)) - set(seg.slots.free_slots)
        assert journal.slots[seg.id] == in_use


def test_the_records_alone_tell_which_objects_and_which_space_and_slots_are_taken() -> None:
    clock = Clock()
    state = MasterState(MasterConfig.load(lease_ttl=5.0), clock=clock)
    for i in range(2):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 8 * MiB, f"h{i}", 1 << 20)
        )
    journal = _watched(state)
    for i in range(12):  # fills both segments and evicts: 12 x 2 x 1 MiB into 16 MiB
        state.puts.put_start("c0", f"k{i}", MiB, i, 2 if i % 3 == 0 else 1, False)
        state.puts.put_end("c0", f"k{i}")
    _agrees(state, journal)
    state.puts.put_start("c0", "abandoned", MiB // 2, 1, 1, False)
    state.puts.put_revoke("c0", "abandoned")  # its writer may be late: the space stays taken until the kill
    state.access.get_replicas("k11")  # leased: its removal leaves it fencing
    state.removal.remove("k11", force=True)
    state.removal.remove("k10")
    _agrees(state, journal)
    fence(state, "c0")
    fence(state, "c1")
    _agrees(state, journal)
    clock.now += 10
    state.expire()
    state.removal.report_corrupt("k9", *_where(state, "k9"), state.objects["k9"].checksum)
    for i in range(3):
        state.puts.put_start("c0", f"after{i}", 2 * MiB, i, 1, False)  # reuses acknowledged slots
        state.puts.put_end("c0", f"after{i}")
    _agrees(state, journal)
    state.members.drop_client("c1")
    fence(state, "c0")
    _agrees(state, journal)


def _where(state: MasterState, key: str) -> tuple[str, int, int]:
    replica = state.objects[key].replicas[0]
    return replica.segment.engine, replica.segment.region_id, replica.offset


def test_the_records_alone_tell_which_disk_records_are_taken() -> None:
    """Demotions, loads, evictions to disk, a failed demotion (its late write holds the space) and
    removals: the disk's taken space follows from the records."""
    clock = Clock()
    state = MasterState(MasterConfig.load(lease_ttl=1.0, demote_watermark=0.5), clock=clock)
    state.members.register_client("c0", "h0")
    state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 1 << 20))
    state.disk.disk_space.mount("c0", "h0", 32 * MiB, "/nvme/tier")
    journal = _watched(state)
    for i in range(14):
        state.puts.put_start("c0", f"k{i}", MiB, i, 1, False)
        state.puts.put_end("c0", f"k{i}")
        orders = state.disk.take("c0")
        state.disk.complete("c0", [m.DiskResult(o.order, i != 9) for o in orders])  # one batch fails
    assert state.counters.evictions_to_disk > 0
    cold = next(meta for meta in state.objects.values() if not meta.replicas)
    assert state.disk.load(cold, lambda: None)
    state.disk.complete("c0", [m.DiskResult(o.order, True) for o in state.disk.take("c0")])
    state.removal.remove("k12", force=True)
    state.removal.remove(cold.key, force=True)
    fence(state, "c0")
    late = []  # demotions whose node never answers: their records' space is held for a late write
    for i in range(14, 18):
        state.puts.put_start("c0", f"k{i}", MiB, i, 1, False)
        state.puts.put_end("c0", f"k{i}")
        late += state.disk.take("c0")
    clock.now += state.config.disk_task_timeout + 1
    state.members.heartbeat("c0")
    state.expire()
    _agrees(state, journal)
    assert late and state.disk.segments and all(journal.disk.values())
    _disk_agrees(state, journal)
    state.disk.complete("c0", [m.DiskResult(o.order, True) for o in late])  # too late: space released
    _disk_agrees(state, journal)


def _disk_agrees(state: MasterState, journal: Journal) -> None:
    for seg in state.disk.segments.values():
        offsets = journal.disk[seg.id]
        assert all(seg.allocator.block_size(o) > 0 for o in offsets)
        assert sum(seg.allocator.block_size(o) for o in offsets) == seg.allocator.used


def test_a_put_request_is_one_record_and_a_key_twice_in_it_is_busy() -> None:
    state = MasterState(MasterConfig.load(), clock=Clock())
    state.members.register_client("c0", "h0")
    state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 1 << 20))
    seen: list[c.PutsStarted] = []
    state.ledger.watch(c.PutsStarted, seen.extend)
    out: list = []
    items = [m.PutItem("a", 4096, 1), m.PutItem("b", 4096, 2), m.PutItem("a", 4096, 1), m.PutItem("c", 0, 3)]
    state.puts.start_puts("c0", items, 1, False, 0, False, out)
    assert [type(x).__name__ for x in out] == ["list", "list", "ObjectBusyError", "InvalidArgumentError"]
    assert [r.keys for r in seen] == [["a", "b"]]
    assert state.objects["a"].replicas == out[0] and not state.objects["a"].complete
