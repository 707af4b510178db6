"""The one writer of the master's tables: the segments of every tier (memory segments, disks), which
objects exist, whether each is committed, and its replicas in every tier (memory allocations, a disk
record). Every change is one typed record, applied in batches; whoever else needs to know of changes
watches the records (the nodes' holds, and a journal or standby when one listens). Placement, eviction,
replication and demotion decide what to change; only this module changes it (tests/unit/test_layers.py
keeps it so).

Space inside a segment (its allocator, fence slots) has its own single writer, kvstore.master.placement:
a record carries a segment or replicas already carved there, and freeing one is placement's job once
the ledger dropped it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from kvstore.master.model import DiskReplica, DiskSegment, ObjectMeta, Replica, Segment


class SegmentMounted(NamedTuple):
    """A node contributed a segment of a tier: memory (Segment) or a disk (DiskSegment)."""

    segment: Segment | DiskSegment


class SegmentDropped(NamedTuple):
    """The segment is gone (unmounted, or its node dropped); its replicas were dropped first."""

    segment: Segment | DiskSegment


class PutStarted(NamedTuple):
    """A put placed its replicas; the object is invisible until PutsCommitted."""

    meta: ObjectMeta


class PutsCommitted(NamedTuple):
    """Puts made visible, a batch of them (one record per PutEnd: no object per key on the put path)."""

    keys: list[str]


class ObjectDropped(NamedTuple):
    """Removed, evicted, reclaimed or lost with its last replica: gone from the table."""

    key: str


class ReplicaAdded(NamedTuple):
    """A copy landed (replication, or a load from disk): the object has one more memory replica."""

    key: str
    replica: Replica


class ReplicaDropped(NamedTuple):
    key: str
    replica: Replica


class ObjectRestored(NamedTuple):
    """A node named an object this master did not know (after a restart or a failover): committed."""

    meta: ObjectMeta


class ReplicaRestored(NamedTuple):
    """A node named a replica of an object this master knows."""

    key: str
    replica: Replica


class DiskRecordSet(NamedTuple):
    """The object has a disk record now (demoted, or a restarted node offered it back)."""

    key: str
    record: DiskReplica


class DiskRecordDropped(NamedTuple):
    key: str


Record = (
    SegmentMounted
    | SegmentDropped
    | PutStarted
    | PutsCommitted
    | ObjectDropped
    | ReplicaAdded
    | ReplicaDropped
    | ObjectRestored
    | ReplicaRestored
    | DiskRecordSet
    | DiskRecordDropped
)


class Ledger:
    def __init__(self) -> None:
        self.objects: dict[str, ObjectMeta] = {}  # read by everyone, written here only
        self.segments: dict[int, Segment] = {}  # memory segments by id (likewise)
        self.disks: dict[int, DiskSegment] = {}  # disk segments by id (likewise)
        self.stored_bytes = 0  # of committed objects, kept as they come and go: stats are O(1)
        # One method per record type, and who watches each type: a dictionary lookup per record (the
        # put path applies two records per object; a chain of isinstance tests cost it 5%).
        self._appliers: dict[type, Callable[[Any], None]] = {
            SegmentMounted: self._segment_mounted,
            SegmentDropped: self._segment_dropped,
            PutStarted: self._put_started,
            ObjectRestored: self._object_restored,
            PutsCommitted: self._puts_committed,
            ObjectDropped: self._object_dropped,
            ReplicaAdded: self._replica_added,
            ReplicaRestored: self._replica_added,
            ReplicaDropped: self._replica_dropped,
            DiskRecordSet: self._disk_record_set,
            DiskRecordDropped: self._disk_record_dropped,
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

    def start(self, meta: ObjectMeta) -> None:
        """apply([PutStarted(meta)]), the record built only when someone watches for it (the put path
        starts one object at a time)."""
        if PutStarted in self._watchers:
            self.apply([PutStarted(meta)])
        else:
            self.objects[meta.key] = meta

    def _segment_mounted(self, r: SegmentMounted) -> None:
        table: dict[int, Any] = self.segments if isinstance(r.segment, Segment) else self.disks
        if r.segment.id in table:
            raise ValueError(f"segment {r.segment.id} is mounted already")
        table[r.segment.id] = r.segment

    def _segment_dropped(self, r: SegmentDropped) -> None:
        table: dict[int, Any] = self.segments if isinstance(r.segment, Segment) else self.disks
        if table.get(r.segment.id) is r.segment:
            del table[r.segment.id]

    def _put_started(self, r: PutStarted) -> None:
        self.objects[r.meta.key] = r.meta

    def _object_restored(self, r: ObjectRestored) -> None:
        self.objects[r.meta.key] = r.meta
        r.meta.complete = True
        self.stored_bytes += r.meta.size

    def _puts_committed(self, r: PutsCommitted) -> None:
        objects, added = self.objects, 0
        for key in r.keys:
            meta = objects[key]
            meta.complete = True
            added += meta.size
        self.stored_bytes += added

    def _object_dropped(self, r: ObjectDropped) -> None:
        gone = self.objects.pop(r.key, None)
        if gone is not None:
            gone.replicas = []
            if gone.complete:
                self.stored_bytes -= gone.size

    def _replica_added(self, r: ReplicaAdded | ReplicaRestored) -> None:
        self.objects[r.key].replicas.append(r.replica)

    def _replica_dropped(self, r: ReplicaDropped) -> None:
        self.objects[r.key].replicas.remove(r.replica)

    def _disk_record_set(self, r: DiskRecordSet) -> None:
        self.objects[r.key].disk = r.record

    def _disk_record_dropped(self, r: DiskRecordDropped) -> None:
        self.objects[r.key].disk = None

    # -- one-record shorthands --------------------------------------------------------------------------
    def drop_replicas(self, key: str, replicas: Iterable[Replica]) -> None:
        self.apply([ReplicaDropped(key, r) for r in list(replicas)])
