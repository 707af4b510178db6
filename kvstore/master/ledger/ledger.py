"""The one writer of the master's tables: the segments of every tier (memory segments, disks), which
objects exist, whether each is committed, their replicas in every tier (memory allocations, a disk
record), the space and fence slots carved inside segments, and the kills that fence freed allocations
off. Every change is one typed record (kvstore.master.ledger.changes), applied in batches; whoever else needs
to know of changes watches the records (the nodes' holds, and a journal or standby when one listens).
Placement, eviction, replication and demotion decide what to change; only this module changes it
(tests/unit/test_layers.py keeps it so).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from kvstore.allocator import MemorySpace
from kvstore.master.ledger.changes import (
    DiskDegraded,
    DiskRecordDropped,
    DiskRecordSet,
    FencesAcknowledged,
    GroupsHidden,
    GroupsShown,
    ObjectDropped,
    ObjectRestored,
    ObjectsAdopted,
    ObjectsBuried,
    ObjectsLost,
    PutsCommitted,
    PutsStarted,
    Record,
    ReplicaAdded,
    ReplicaDropped,
    ReplicaRestored,
    ReplicaTargetSet,
    RestoreEnded,
    SegmentDropped,
    SegmentMounted,
    SegmentSuspected,
    SpaceFreed,
    SpaceReleased,
    SpaceTaken,
    TombstonesLearned,
)
from kvstore.master.ledger.fences import FenceBook, Kill
from kvstore.master.ledger.groups import GroupIndex
from kvstore.master.ledger.locations import SegmentPlace
from kvstore.master.ledger.model import DiskReplica, DiskSegment, Replica, Segment
from kvstore.master.ledger.objects import ObjectMeta, Objects
from kvstore.rpc.disk_record import PAGE
from kvstore.rpc.records import MEMORY


class Carved(NamedTuple):
    """The replicas placement carved for a run of keys, `count` a key in key order, and the same as
    columns (what PutsStarted records)."""

    replicas: list[Replica]
    segment_ids: list[int]
    offsets: list[int]
    slots: list[int]
    gens: list[int]


class EndedPuts(NamedTuple):
    """What Ledger.end_puts did: the indexes of the keys with no put in progress by the client, the keys
    committed, those of them short of the copies their put asked for, per memory segment id the highest
    hold number of a put committed with a copy there (its node must acknowledge it), the bytes
    committed, and the keys committed in the eviction policy's sample (end_puts' `sample`)."""

    missing: list[int]
    ended: list[str]
    short_of_copies: list[str]
    marks: dict[int, int]
    bytes: int
    sampled: list[str]


class Ledger:
    def __init__(self, fences: FenceBook) -> None:
        """`fences`: the kills queued for nodes (issued and acknowledged here only; nodes take them from
        it on their work channel)."""
        self.fences = fences
        # Read by everyone, written here only (a C++ table: kvstore.master.ledger.objects).
        self.objects = Objects()
        # Which group members readers see, kept as members are committed and dropped (likewise).
        self.groups = GroupIndex(self.objects, fences.clock)
        self.segments: dict[int, Segment] = {}  # memory segments by id (likewise)
        # Their allocators and slots as placement walks them, in C++ (csrc/meta/memory_space): a batch of
        # puts is placed in one call (likewise written here only).
        self.memory = MemorySpace()
        self.disks: dict[int, DiskSegment] = {}  # disk segments by id (likewise)
        # Of the memory segments, kept as they mount, go and are suspected (SegmentMounted, SegmentDropped,
        # SegmentSuspected), so a replay rebuilds them and readers ask in O(1): bytes (puts check them),
        # fence slots, and how many are suspected unreachable (every read asks whether any is).
        self.memory_capacity = 0
        self.memory_fence_slots = 0
        self.suspects = 0
        self.stored_bytes = 0  # of committed objects, kept as they come and go: stats are O(1)
        # One method per record type, and who watches each type: a dictionary lookup per record (the
        # put path applies two records per object; a chain of isinstance tests cost it 5%).
        self._appliers: dict[type, Callable[[Any], None]] = {
            SegmentMounted: self._segment_mounted,
            SegmentDropped: self._segment_dropped,
            PutsStarted: self._puts_started,
            ObjectRestored: self._object_restored,
            ObjectsAdopted: self._objects_adopted,
            PutsCommitted: self._puts_committed,
            ObjectDropped: self._object_dropped,
            # Tombstones (fences.tombstones); they lapse by the clock, not by a record (lapse_fences).
            ObjectsBuried: lambda r: self.fences.tombstones.bury(r.keys, r.gen, r.until, r.evicted),
            ObjectsLost: lambda r: self.fences.tombstones.lose(r.keys, r.until),
            TombstonesLearned: lambda r: self.fences.tombstones.learn(r.tombs, r.until),
            ReplicaAdded: self._replica_added,
            ReplicaRestored: self._replica_added,
            ReplicaDropped: self._replica_dropped,
            ReplicaTargetSet: self._replica_target_set,
            DiskRecordSet: self._disk_record_set,
            DiskRecordDropped: self._disk_record_dropped,
            RestoreEnded: self._restore_ended,
            SegmentSuspected: self._segment_suspected,
            DiskDegraded: self._disk_degraded,
            GroupsShown: lambda r: None,  # (derived: the ledger makes them as groups fill and empty)
            GroupsHidden: lambda r: None,
            # Made by the ledger's own methods as they carve and free (below); applied here when replayed
            # into another ledger (a journal, a standby): the same space, slots and kills follow.
            SpaceTaken: self._space_taken,
            SpaceFreed: self._space_freed,
            SpaceReleased: self._space_released,
            FencesAcknowledged: self._fences_acknowledged,
        }
        self._watchers: dict[type, list[Callable[[Any], None]]] = {}

    def watch(self, kind: type[Record], watcher: Callable[[list[Any]], None]) -> None:
        """`watcher(records)` sees the records of type `kind` of every batch once it is applied, in
        order (a journal, the nodes' holds, a standby)."""
        self._watchers.setdefault(kind, []).append(watcher)

    def apply(self, records: Sequence[Record]) -> None:
        """Applies the records in order (each must fit the table as the ones before left it)."""
        appliers = self._appliers
        for r in records:
            appliers[type(r)](r)
        for kind, watchers in self._watchers.items():
            of_kind = [r for r in records if type(r) is kind]
            if of_kind:
                for watcher in watchers:
                    watcher(of_kind)

    def _tell(self, records: list[Any]) -> None:
        """Shows watchers records of one kind that the ledger's own methods applied."""
        for watcher in self._watchers.get(type(records[0]), ()):
            watcher(records)

    def _table(self, segment: Segment | DiskSegment) -> dict[int, Any]:
        return self.segments if segment.tier == MEMORY else self.disks

    def _segment_mounted(self, r: SegmentMounted) -> None:
        table = self._table(r.segment)
        if r.segment.id in table:
            raise ValueError(f"segment {r.segment.id} is mounted already")
        table[r.segment.id] = r.segment
        seg = r.segment
        if isinstance(seg, Segment):  # the table names replicas' segments by id
            self.objects.segments[seg.id] = seg
            self.objects.places[seg.id] = SegmentPlace(
                tier=seg.tier, host_id=seg.host_id, engine=seg.engine, region_id=seg.region_id
            )
            self.memory.add(seg.id, seg.host_id, seg.allocator, seg.slots)
            self.memory.set_placeable(seg.id, seg.placeable)
            self.memory_capacity += seg.size
            self.memory_fence_slots += seg.fence_slots
            self.suspects += not seg.usable
        else:
            self.objects.disks[seg.id] = seg

    def _segment_dropped(self, r: SegmentDropped) -> None:
        table = self._table(r.segment)
        seg = table.get(r.segment.id)  # (this ledger's segment of that id: replayed, not the record's)
        if seg is not None:
            del table[seg.id]
            if isinstance(seg, Segment):
                self.memory.remove(seg.id)
                self.fences.drop_segment(seg)  # nothing of it is read or written again
                self.memory_capacity -= seg.size
                self.memory_fence_slots -= seg.fence_slots
                self.suspects -= not seg.usable

    # A record naming a segment this ledger does not hold (gone since: a late report) changes nothing: it
    # is never applied to the record's own object, which another ledger's table may hold (a replay's source).
    def _restore_ended(self, r: RestoreEnded) -> None:
        seg = self._table(r.segment).get(r.segment.id)
        if seg is None:
            return
        if isinstance(seg, DiskSegment):
            seg.restoring = False
            return
        taken = seg.restoring
        if taken is None:
            return
        seg.restoring = None
        seg.slots.restart(taken)
        self.placeable_changed(seg)

    def _segment_suspected(self, r: SegmentSuspected) -> None:
        seg = self.segments.get(r.segment.id)
        if seg is None:
            return
        self.suspects += seg.usable - (r.since == 0.0)  # (+1 suspected now, -1 trusted again, else 0)
        seg.suspect_since = r.since
        self.placeable_changed(seg)

    def _disk_degraded(self, r: DiskDegraded) -> None:
        seg = self.disks.get(r.segment.id)
        if seg is not None:
            seg.degraded = r.reason

    def placeable_changed(self, seg: Segment) -> None:
        """Whether new replicas may go to `seg` changed (it was suspected, trusted, or restored)."""
        if self.segments.get(seg.id) is seg:
            self.memory.set_placeable(seg.id, seg.placeable)

    def _puts_started(self, r: PutsStarted) -> None:
        self._start_rows(r)

    def _start_rows(self, r: PutsStarted) -> list[int]:
        """The record's objects' rows, made uncommitted (their puts in progress); their references."""
        copies = (r.copies_each, r.segment_ids, r.offsets, r.slots, r.gens)
        return self.objects.table.start_puts(
            r.keys, r.sizes, r.checksums, [], *copies,
            self.objects.writer_number(r.writer), r.pinned, r.base_replicas, r.started, r.put_deadline,
        )  # fmt: skip

    def start_puts(self, r: PutsStarted) -> list[int]:
        """Applies the record (as apply does) and returns its new objects' references in key order: the
        put path names them to the holds with no object per key."""
        refs = self._start_rows(r)
        self._tell([r])
        return refs

    def _object_restored(self, r: ObjectRestored) -> None:
        for meta in r.metas:
            meta.complete = True
        self.objects.add_many(r.metas)
        self.stored_bytes += sum([meta.size for meta in r.metas])
        self._committed([meta.key for meta in r.metas])

    def _objects_adopted(self, r: ObjectsAdopted) -> None:
        writer = self.objects.writer_number(r.segment.client_id)
        self.stored_bytes += self.objects.table.adopt_many(
            r.segment.id, r.records, writer, r.last_access, r.most_replicas
        )
        self._committed([record[3] for record in r.records])

    def _puts_committed(self, r: PutsCommitted) -> None:
        self.stored_bytes += self.objects.commit_many(r.keys)
        self._committed(r.keys)

    def end_puts(self, client_id: str, keys: list[str], link: int = -1, sample: int = 0) -> EndedPuts:
        """Commits the client's puts of `keys` in one table crossing (PutsCommitted of those it had in
        progress: the put path makes no record per key). A key with no put of it in progress by this
        client (absent, committed, another's, or named twice: the second) is left as it is. The eviction
        policy's insertion in the same crossing (EvictionPolicy.insert_last): each object committed goes
        last in table order `link` (-1: none), and those whose key's CRC-32 is divisible by `sample` (0:
        none) are named back."""
        writer = self.objects.known_writer(client_id)
        if writer is None:  # (never wrote: it has no put in progress, and naming it would keep a number)
            return EndedPuts(list(range(len(keys))), [], [], {}, 0, [])
        bytes_added, missing, ended, short, marks, sampled = self.objects.table.end_puts(
            keys, writer, link, sample
        )
        if ended:
            self.stored_bytes += bytes_added
            self._committed(ended)
            self._tell([PutsCommitted(ended)])
        return EndedPuts(missing, ended, short, marks, bytes_added, sampled)

    def _committed(self, keys: list[str]) -> None:
        """Objects were committed: group members among them are shown or hidden (kvstore.master.ledger.groups;
        one crossing finds them, no Python step per key of no group)."""
        maybe = self.objects.table.with_hash(keys)
        if maybe:
            shown, hidden = self.groups.committed(maybe)
            if shown:
                self._tell([GroupsShown(shown)])
            if hidden:
                self._tell([GroupsHidden(hidden)])

    def _dropping(self, keys: list[str]) -> None:
        """These objects are about to be dropped: the rest of any whole group among them are hidden."""
        maybe = self.objects.table.with_hash(keys)
        if maybe:
            objects = self.objects
            committed = [key for key in maybe if (meta := objects.get(key)) is not None and meta.complete]
            hidden = self.groups.dropped(committed)
            if hidden:
                self._tell([GroupsHidden(hidden)])

    def _object_dropped(self, r: ObjectDropped) -> None:
        if "#" in r.key:
            self._dropping([r.key])
        freed = self.objects.drop_key(r.key)
        if freed > 0:
            self.stored_bytes -= freed

    def _replica_added(self, r: ReplicaAdded | ReplicaRestored) -> None:
        self.objects.add_replica(self.objects[r.key], r.replica)

    def _replica_dropped(self, r: ReplicaDropped) -> None:
        self.objects.drop_replica(self.objects[r.key], r.replica)

    def _replica_target_set(self, r: ReplicaTargetSet) -> None:
        self.objects.table.set_target_replicas(self.objects[r.key].ref, r.replicas)

    def _disk_record_set(self, r: DiskRecordSet) -> None:
        self.objects.set_disk(self.objects[r.key], r.record)

    def _disk_record_dropped(self, r: DiskRecordDropped) -> None:
        self.objects.set_disk(self.objects[r.key], None)

    # -- space and fence records made elsewhere (a replay): this ledger carves what they name -----------
    def _space_taken(self, r: SpaceTaken) -> None:
        seg = self._table(r.replica.segment).get(r.replica.segment.id)
        if seg is None or not seg.allocator.reserve(r.replica.offset, r.size):
            where = f"{r.replica.offset} of segment {r.replica.segment.id}"
            raise ValueError(f"{r.key!r}: the space at {where} is not free")
        seg.allocations += 1
        replica = r.replica
        if not isinstance(replica, Replica) or not isinstance(seg, Segment):  # (a disk record's)
            return
        if seg.restoring is not None:  # a restarted node named it back: its slot is among those taken
            seg.restoring.add(replica.slot)
        elif seg.slots.take() != replica.slot:  # slots are handed out in one order: the run's
            raise ValueError(f"{r.key!r}: slot {replica.slot} of segment {seg.id} is not the next free one")
        self.fences.observe(replica.gen)

    def _space_freed(self, r: SpaceFreed) -> None:
        seg = self._table(r.replica.segment).get(r.replica.segment.id)
        if seg is None:  # (gone: nothing to give back, as when the ledger freed it)
            return
        seg.allocations -= 1
        replica = r.replica
        if not isinstance(replica, Replica) or not isinstance(seg, Segment) or r.kill is None:
            if not r.held:  # a disk record's (no kill: only its own node writes it)
                seg.allocator.free(replica.offset)
            return
        if r.held:
            self.fences.held_bytes += seg.allocator.block_size(replica.offset)
        else:
            seg.allocator.free(replica.offset)
        held = replica.offset if r.held else None
        self.fences.kill(seg, replica.slot, replica.gen, held, r.key, r.kill.until)

    def _space_released(self, r: SpaceReleased) -> None:
        seg = self.disks.get(r.replica.segment.id)
        if seg is not None:
            seg.allocator.free(r.replica.offset)

    def _fences_acknowledged(self, r: FencesAcknowledged) -> None:
        named = [(k.segment.id, k.slot, k.gen) for k in r.kills]
        self._kills_applied(self.fences.settle_named(r.client_id, named))

    # -- one-record shorthands --------------------------------------------------------------------------
    def drop_replicas(self, key: str, replicas: Iterable[Replica]) -> None:
        self.apply([ReplicaDropped(key, r) for r in list(replicas)])

    def drop_copies_on(self, seg: Segment, keys: list[str]) -> tuple[list[str], list[str]]:
        """`seg` is gone (SegmentDropped): its copies of these objects go (ReplicaDropped each, in one
        table crossing). Returns the keys left with no copy and no disk record, and those left on disk
        only."""
        tell = ReplicaDropped in self._watchers
        dropped, bare, disk_only = self.objects.table.drop_copies_on(seg.id, keys, tell)
        if dropped:
            self._tell(
                [ReplicaDropped(key, Replica(seg, offset, slot, gen)) for key, offset, slot, gen in dropped]
            )
        return bare, disk_only

    def drop_objects(self, keys: list[str]) -> None:
        """ObjectDropped of each key, applied in one table crossing (the records are made only for those
        who watch them)."""
        self._dropping(keys)
        self.stored_bytes -= self.objects.table.erase_many(keys)
        if ObjectDropped in self._watchers and keys:
            self._tell([ObjectDropped(key) for key in keys])

    # -- space inside segments: the allocator picks an offset as it carves, so these make the records ---
    def take(self, seg: Segment, key: str, size: int) -> Replica:
        """Carves `size` bytes and a fence slot of `seg` for `key`, in a new generation (SpaceTaken). The
        caller saw room for it (largest_free, has_slot): the master is single-threaded."""
        if not seg.slots.has_slot or (offset := seg.allocator.allocate(size)) is None:
            raise AssertionError(f"take() without room on segment {seg.id}")
        slot = seg.slots.take()
        assert slot is not None  # (has_slot)
        seg.allocations += 1
        replica = Replica(seg, offset, slot, self.fences.generation())
        if SpaceTaken in self._watchers:  # the put path: a record only for someone who watches
            self._tell([SpaceTaken(key, replica, size)])
        return replica

    def place(
        self, key: str, size: int, count: int, exclude: list[int], spread_from: list[str]
    ) -> list[Replica] | None:
        """Carves `count` replicas of `key` where placement's rule puts them
        (kvstore.master.planners.placement: the rule runs in C++, over self.memory); None, and nothing
        carved, when they do not fit now."""
        placed = self.memory.place(size, count, exclude, spread_from)
        if placed is None:
            return None
        return self._carved([key], [size], *placed)

    def place_many(self, keys: list[str], sizes: list[int], count: int) -> Carved:
        """Carves `count` replicas of each key in turn, as `place` would one at a time: `count` per key,
        for the keys placed, which stop before the first that does not fit now."""
        carved = self.carve_many(keys, sizes, count)
        return carved._replace(
            replicas=self._replicas(carved.segment_ids, carved.offsets, carved.slots, carved.gens)
        )

    def carve_many(self, keys: list[str], sizes: list[int], count: int) -> Carved:
        """place_many's carving as columns only (its `replicas` empty): no Python object per copy unless
        someone watches SpaceTaken."""
        placed, (segment_ids, offsets, slots) = self.memory.place_many(sizes, count)
        if not placed:
            return Carved([], [], [], [], [])
        gens = self._carve(keys, sizes, segment_ids, offsets, slots)
        return Carved([], segment_ids, offsets, slots, gens)

    def _carved(
        self, keys: list[str], sizes: list[int], segment_ids: list[int], offsets: list[int], slots: list[int]
    ) -> list[Replica]:
        """The replicas the memory space carved, as _carve records them."""
        return self._replicas(
            segment_ids, offsets, slots, self._carve(keys, sizes, segment_ids, offsets, slots)
        )

    def _carve(
        self, keys: list[str], sizes: list[int], segment_ids: list[int], offsets: list[int], slots: list[int]
    ) -> list[int]:
        """Records what the memory space carved (`len(offsets) // len(keys)` copies a key, in key order):
        each segment's count of allocations grows, the copies take new generations (returned), and
        SpaceTaken tells of each when watched."""
        first = self.fences.generations(len(offsets))
        gens = list(range(first, first + len(offsets)))
        segments = self.segments
        for seg_id, carved in Counter(segment_ids).items():
            segments[seg_id].allocations += carved
        if SpaceTaken in self._watchers:
            count = len(offsets) // len(keys)
            replicas = self._replicas(segment_ids, offsets, slots, gens)
            self._tell([SpaceTaken(keys[i // count], r, sizes[i // count]) for i, r in enumerate(replicas)])
        return gens

    def _replicas(
        self, segment_ids: list[int], offsets: list[int], slots: list[int], gens: list[int]
    ) -> list[Replica]:
        return list(map(Replica, map(self.segments.__getitem__, segment_ids), offsets, slots, gens))

    def take_back(
        self, seg: Segment, key: str, offset: int, slot: int, gen: int, size: int
    ) -> Replica | None:
        """Takes back an allocation the node of `seg` (being restored) still holds: exactly [offset,
        offset + size) and its fence slot, in its generation. None when either is not free."""
        taken = seg.restoring
        if taken is None or slot >= seg.fence_slots or slot in taken or offset + size > seg.size:
            return None
        if not seg.allocator.reserve(offset, size):
            return None
        taken.add(slot)
        seg.allocations += 1
        self.fences.observe(gen)  # every later generation is above it
        replica = Replica(seg, offset, slot, gen)
        self._tell([SpaceTaken(key, replica, size)])
        return replica

    def take_back_many(
        self, seg: Segment, records: list[tuple[int, int, int, str, int, int, bool, int]]
    ) -> list[bool]:
        """take_back of each record a node names (RestoreSegment's: offset, slot, gen, key, size, ...), in
        order, with one allocator call: per record whether it was taken."""
        taken = seg.restoring
        slots = [r[1] for r in records]
        if taken is None or len(set(slots)) < len(slots):  # a slot named twice: one at a time
            return [self.take_back(seg, r[3], r[0], r[1], r[2], r[4]) is not None for r in records]
        free = [i for i, slot in enumerate(slots) if slot < seg.fence_slots and slot not in taken]
        reserved = seg.allocator.reserve_many([records[i][0] for i in free], [records[i][4] for i in free])
        out = [False] * len(records)
        adopted = [i for i, ok in zip(free, reserved, strict=True) if ok]
        for i in adopted:
            out[i] = True
        if adopted:
            taken.update([slots[i] for i in adopted])
            seg.allocations += len(adopted)
            self.fences.observe(max([records[i][2] for i in adopted]))  # every later generation is above
            if SpaceTaken in self._watchers:
                self._tell(
                    [SpaceTaken(records[i][3], Replica(seg, *records[i][:3]), records[i][4]) for i in adopted]
                )
        return out

    def end_restore(self, seg: Segment | DiskSegment) -> None:
        self.apply([RestoreEnded(seg)])

    def free(self, key: str, replica: Replica, *, hold: bool = False, read_until: float = 0.0) -> None:
        """`key` gives the allocation up and its node is sent a kill (SpaceFreed). `hold`: a writer may
        still be moving bytes into it, so its space stays taken until the node acknowledges the kill;
        `read_until`: readers may hold its location until then, so `key` is fencing meanwhile. Nothing
        to do but forget the key when the segment is gone."""
        seg = replica.segment
        seg.allocations -= 1
        if self.segments.get(seg.id) is not seg:
            return
        if hold:
            self.fences.held_bytes += seg.allocator.block_size(replica.offset)
        else:
            seg.allocator.free(replica.offset)
        held = replica.offset if hold else None
        kill = self.fences.kill(seg, replica.slot, replica.gen, held, key, read_until)
        if SpaceFreed in self._watchers:
            self._tell([SpaceFreed(key, replica, kill, hold)])

    def acknowledge(self, client_id: str, kill_ids: Iterable[int]) -> None:
        """The node applied these kills: their slots, and space held for late writers, go back to their
        segments (a slot is reused only once no late copy can be running in it)."""
        done = self.fences.acknowledge(client_id, kill_ids)
        self._kills_applied(done)
        if done:
            self._tell([FencesAcknowledged(client_id, done)])

    def _kills_applied(self, done: list[Kill]) -> None:
        """Their slots, and the space held for late writers, go back to their segments."""
        for k in done:
            seg = k.segment
            if self.segments.get(seg.id) is not seg:
                continue
            if seg.restoring is not None:  # being restored: the slot is not among those taken back
                seg.restoring.discard(k.slot)
            else:
                seg.slots.give_back(k.slot)
            if k.held_offset is not None:
                self.fences.held_bytes -= seg.allocator.block_size(k.held_offset)
                seg.allocator.free(k.held_offset)

    def lapse_fences(self) -> None:
        """Lifts the fencing of keys whose readers' leases have lapsed (each kill says until when: no
        record, the clock decides)."""
        self.fences.expire()

    def take_disk(self, seg: DiskSegment, key: str, nbytes: int) -> DiskReplica | None:
        """Carves a record of `nbytes` on the disk `seg` for `key`; None when it does not fit."""
        offset = seg.allocator.allocate(nbytes)
        if offset is None:
            return None
        seg.allocations += 1
        record = DiskReplica(seg, offset)
        self._tell([SpaceTaken(key, record, nbytes)])
        return record

    def take_back_disk(self, seg: DiskSegment, key: str, offset: int, nbytes: int) -> DiskReplica | None:
        """Takes exactly [offset, offset + nbytes) for a record a restarted node still holds; None if that
        space is not free."""
        if offset % PAGE or not seg.allocator.reserve(offset, nbytes):
            return None
        seg.allocations += 1
        record = DiskReplica(seg, offset)
        self._tell([SpaceTaken(key, record, nbytes)])
        return record

    def free_disk(self, key: str, record: DiskReplica, *, hold: bool = False) -> None:
        """The record no longer holds `key`; its space is free again, unless `hold` (a late write may still
        land there: release_disk() it once that cannot happen). Nothing to do but forget the key when
        the disk is gone."""
        seg = record.segment
        seg.allocations -= 1
        if self.disks.get(seg.id) is not seg:
            return
        if not hold:
            seg.allocator.free(record.offset)
        self._tell([SpaceFreed(key, record, None, hold)])

    def release_disk(self, record: DiskReplica) -> None:
        """A held record's space is free again (SpaceReleased)."""
        seg = record.segment
        if self.disks.get(seg.id) is seg:
            seg.allocator.free(record.offset)
            self._tell([SpaceReleased(record)])

    # -- a read's soft state: no records (kvstore.master.ledger.changes says what a failover does with it) --
    def use(
        self, keys: list[str], now: float, lease_until: float, half_life: float, hot_heat: float, count: bool
    ) -> list[int]:
        """A use of each key present and committed, under the one read rule (ObjectTable.use_many,
        csrc/meta/object_use): its lease reaches `lease_until` (0.0: no lease; with one, a member's whole
        group), last_access is `now`, with `count` the read is counted, and its heat decays by `half_life`
        and grows by one. Per key the bits of kvstore.master.ledger.objects USED, ATTENTION (hot at
        `hot_heat`, short of copies, or a set count), IN_MEMORY, ON_DISK (0: absent or a put in progress)."""
        return self.objects.table.use_many(keys, now, lease_until, half_life, hot_heat, count)

    def locate_many(
        self,
        keys: list[str],
        prefix: bool,
        now: float,
        lease_until: float,
        half_life: float,
        hot_heat: float,
        transient: bool,
        touch_order: int = -1,
        sample: int = 1,
    ) -> tuple[bytes, list[str], list[tuple[int, str, bool, int, bool]], int]:
        """A reader's lookup of a batch (ObjectTable.locate_many): every hit a use as use() with a lease and
        a count, and the reply encoded in the table; with `touch_order` (an eviction policy's read_touch)
        each hit linked in that order moves last there in the same pass. Returns (the reply; the hits the
        policy is told of: those moved whose CRC-32 is divisible by `sample`, or every hit without an
        order; the notes of the hits the caller completes, as (index, key, in memory, disk segment,
        attention); how many keys were found)."""
        objects = self.objects
        return objects.table.locate_many(
            keys,
            prefix,
            now,
            lease_until,
            half_life,
            hot_heat,
            objects.places,
            transient,
            touch_order,
            sample,
        )

    def heat_at(self, meta: ObjectMeta, now: float, half_life: float) -> float:
        """The object's heat decayed to `now` under the read rule: what replication plans by."""
        return self.objects.table.heat_at(meta.ref, now, half_life)

    def loaded(self, meta: ObjectMeta, now: float) -> None:
        """The object was read from its disk record (or loaded from it) at `now`: a second read within the
        disk tier's promote window promotes it (kvstore.master.planners.disk_tier)."""
        self.objects.table.set_loaded_at(meta.ref, now)
