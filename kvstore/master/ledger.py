"""The one writer of the master's object table: which objects exist, whether each is committed, and its
replicas in every tier (memory allocations, a disk record). Every change is one typed record, applied in
batches; whoever else needs to know of changes observes the records (the nodes' holds, and a journal or
standby when one listens). Placement, eviction, replication and demotion decide what to change; only
this module changes it (tests/unit/test_layers.py keeps it so).

Space itself (allocators, fence slots) has its own single writer, kvstore.master.placement: a record
carries replicas already placed there, and freeing one is placement's job once the ledger dropped it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from kvstore.master.model import DiskReplica, ObjectMeta, Replica


class PutStarted(NamedTuple):
    """A put placed its replicas; the object is invisible until PutCommitted."""

    meta: ObjectMeta


class PutCommitted(NamedTuple):
    key: str


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
    PutStarted
    | PutCommitted
    | ObjectDropped
    | ReplicaAdded
    | ReplicaDropped
    | ObjectRestored
    | ReplicaRestored
    | DiskRecordSet
    | DiskRecordDropped
)
Observer = Callable[[Sequence[Record]], None]


class Ledger:
    def __init__(self) -> None:
        self.objects: dict[str, ObjectMeta] = {}  # read by everyone, written here only
        self.stored_bytes = 0  # of committed objects, kept as they come and go: stats are O(1)
        self._observers: list[Observer] = []

    def observe(self, observer: Observer) -> None:
        """`observer(records)` sees every batch once it is applied."""
        self._observers.append(observer)

    def apply(self, records: Sequence[Record]) -> None:
        """Applies the records in order (each must fit the table as the ones before left it)."""
        objects = self.objects
        for r in records:
            if isinstance(r, (PutStarted, ObjectRestored)):
                objects[r.meta.key] = r.meta
                if isinstance(r, ObjectRestored):
                    r.meta.complete = True
                    self.stored_bytes += r.meta.size
            elif isinstance(r, PutCommitted):
                meta = objects[r.key]
                meta.complete = True
                self.stored_bytes += meta.size
            elif isinstance(r, ObjectDropped):
                gone = objects.pop(r.key, None)
                if gone is not None:
                    gone.replicas = []
                    if gone.complete:
                        self.stored_bytes -= gone.size
            elif isinstance(r, (ReplicaAdded, ReplicaRestored)):
                objects[r.key].replicas.append(r.replica)
            elif isinstance(r, ReplicaDropped):
                objects[r.key].replicas.remove(r.replica)
            elif isinstance(r, DiskRecordSet):
                objects[r.key].disk = r.record
            else:
                objects[r.key].disk = None
        for observer in self._observers:
            observer(records)

    # -- one-record shorthands --------------------------------------------------------------------------
    def drop_replicas(self, key: str, replicas: Iterable[Replica]) -> None:
        self.apply([ReplicaDropped(key, r) for r in list(replicas)])
