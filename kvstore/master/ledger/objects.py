"""The master's objects: a table in C++ (csrc/meta/object_table, ~250 bytes an object against ~1,200 for
Python objects), read here through views. `Objects` is the ledger's map of key -> ObjectMeta; an
ObjectMeta is a reference to one row, made when looked up, holding nothing of its own but the key: two
views of the same object are equal, and a view of an object that was dropped has no replicas and raises
KeyError when any other field is read (its row may hold another object by then).

Every field is read through the view and written by the ledger (kvstore.master.ledger.ledger): which
objects exist, whether committed, their replicas and disk records by its records; a read's state (lease,
last access, access count, heat, loaded_at) by its use methods, under the one read rule in C++
(csrc/meta/object_use).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvstore._meta import ObjectTable
from kvstore.master.ledger.model import DiskReplica, DiskSegment, Replica, Segment


@dataclass(slots=True)
class NewObject:
    """An object about to be recorded (a restored one; a put started, as its holds are queued): the ledger
    makes its row."""

    key: str
    size: int
    checksum: int
    replicas: list[Replica]
    writer: str
    complete: bool = False
    pinned: bool = False
    last_access: float = 0.0
    base_replicas: int = 1
    target_replicas: int = 0  # (none set yet: what its holds tell the nodes, as an ObjectMeta's)
    disk: DiskReplica | None = None
    hold_seq: int = field(default=0)


def _read_only(name: str, doc: str) -> Any:
    get = getattr(ObjectTable, name)

    def fget(view: ObjectMeta) -> Any:
        return get(view._table, view.ref)

    return property(fget, doc=doc)


class ObjectMeta:
    """One object of the table (see the module's doc)."""

    __slots__ = ("_objects", "_table", "key", "ref")

    def __init__(self, objects: Objects, ref: int, key: str) -> None:
        self._objects = objects
        self._table = objects.table
        self.ref = ref
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectMeta) and other.ref == self.ref and other._table is self._table

    def __hash__(self) -> int:
        return hash(self.ref)

    def __repr__(self) -> str:
        return f"ObjectMeta({self.key!r}, ref={self.ref:#x})"

    @property
    def alive(self) -> bool:
        """False once the object was dropped (a put revoked, reclaimed, evicted, removed)."""
        return self._table.alive(self.ref)

    size = _read_only("size", "Bytes of the value.")
    checksum = _read_only("checksum", "XXH3-64 of the value, as its writer declared it.")
    complete = _read_only("complete", "Committed (its put ended): readers see it unless it is hidden.")
    group = _read_only(
        "group", "0: not a group member; 1: its group is whole; 2: hidden (kvstore.master.ledger.groups)."
    )

    @property
    def visible(self) -> bool:
        """Readers see it: committed, and not a member of a group missing some member."""
        return self.complete and self.group != 2

    pinned = _read_only("pinned", "Never evicted.")
    base_replicas = _read_only("base_replicas", "Replicas its put asked for.")
    lease_until = _read_only("lease_until", "Readers may hold its locations until then.")
    last_access = _read_only("last_access", "When it was last read or written.")
    access_count = _read_only("access_count", "Reads of it.")
    target_replicas = _read_only("target_replicas", "Set by change_replica; 0 lets heat decide.")
    heat = _read_only("heat", "Accesses, decayed with the configured half-life (as of heat_time).")
    heat_time = _read_only("heat_time", "When heat was last decayed.")
    loaded_at = _read_only("loaded_at", "When it was last loaded from disk for a reader (0: never).")
    hold_seq = _read_only("hold_seq", "The last hold its put sent its nodes (kvstore.master.ledger.holds).")

    @property
    def writer(self) -> str:
        """The client that put it."""
        return self._objects.writer_name(self._table.writer(self.ref))

    @property
    def replicas(self) -> list[Replica]:
        """Its memory replicas, in the order they were added (a new list: change them through the ledger);
        none once the object was dropped (whoever still holds its view finds nothing to read)."""
        segments, table = self._objects.segments, self._table
        if not table.alive(self.ref):
            return []
        return [Replica(segments[s], offset, slot, gen) for s, offset, slot, gen in table.copies(self.ref)]

    @property
    def replica_count(self) -> int:
        return self._table.copy_count(self.ref)

    @property
    def disk(self) -> DiskReplica | None:
        """Its record on a node's disk tier, if it has one."""
        seg = self._table.disk_segment(self.ref)
        return None if seg == 0 else DiskReplica(self._objects.disks[seg], self._table.disk_offset(self.ref))


# What ObjectTable.use_many found of a key (csrc/meta/object_use.h UseFound); 0: absent or a put in progress.
USED, ATTENTION, IN_MEMORY, ON_DISK = 1, 2, 4, 8

MEMORY_ORDER, DISK_ORDER = 0, 1  # the table's two orders: memory replicas' and disk records' eviction


class TableOrder:
    """One of the table's eviction orders as an eviction policy keeps it
    (kvstore.master.planners.eviction.KeyOrder): links through the objects' rows, nothing per key in Python.
    Only objects in the table can be in it; dropping an object takes it out."""

    def __init__(self, objects: Objects, order: int) -> None:
        self._table, self._order = objects.table, order
        self.table_order: int | None = order  # (KeyOrder: a lookup in the table may move its hits)

    def add(self, key: str, front: bool = False) -> None:
        self._table.order_add(self._order, key, front)

    def add_many(self, keys: list[str], front: bool = False) -> None:
        self._table.order_add_many(self._order, keys, front)

    def touch(self, key: str) -> bool:
        return self._table.order_touch(self._order, key)

    def touch_many(self, keys: list[str]) -> list[bool]:
        return self._table.order_touch_many(self._order, keys)

    def discard(self, key: str) -> bool:
        return self._table.order_remove(self._order, key)

    def discard_many(self, keys: list[str]) -> list[str]:
        return self._table.order_remove_many(self._order, keys)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._table.order_has(self._order, key)

    def __iter__(self) -> Iterator[str]:
        """First to go first, a slice at a time: 8 keys, then 4x more each time up to 512 (an eviction
        usually takes the first; a walk of 256 keys per eviction cost a 1 MiB put 80 µs of the master)."""
        table, order = self._table, self._order
        after, slice_keys = None, 8
        while True:
            found = table.walk(order, after, slice_keys)
            for key, _ in found:
                yield key
            if len(found) < slice_keys:
                return
            after = found[-1][1]
            slice_keys = min(slice_keys * 4, 512)

    def __len__(self) -> int:
        return self._table.length(self._order)

    def first_victim(self, now: float) -> tuple[str | None, str | None]:
        """The first key of the order that may be evicted (committed, not pinned) and no reader holds,
        and the first such one a reader holds (None where there is none): one crossing."""
        return self._table.first_victim(self._order, now)


class Objects(Mapping[str, ObjectMeta]):
    """Key -> ObjectMeta over the table. Written by the ledger only (its methods below are the ledger's)."""

    def __init__(self) -> None:
        self.table = ObjectTable(secrets.randbits(64))
        # Every segment ever mounted, by id: a view names its replicas' segments by id, and a replica
        # outlives its segment's unmounting until the object is told (a few entries per node restart).
        self.segments: dict[int, Segment] = {}
        self.disks: dict[int, DiskSegment] = {}
        # Per memory segment, what a reader's location of a copy there starts with (tier, host, engine,
        # region): ObjectTable.locate_many builds the reply's records from it.
        self.places: dict[int, tuple[int, str, str, int]] = {}
        self._writers: dict[str, int] = {}  # client id -> its number in the table (never reused)
        self._writer_names: list[str] = [""]

    # -- reading ---------------------------------------------------------------------------------------
    def __getitem__(self, key: str) -> ObjectMeta:
        ref = self.table.find(key)
        if ref is None:
            raise KeyError(key)
        return ObjectMeta(self, ref, key)

    def get(self, key: str, default: Any = None) -> Any:
        ref = self.table.find(key)
        return default if ref is None else ObjectMeta(self, ref, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.table.find(key) is not None

    def __len__(self) -> int:
        return len(self.table)

    def __iter__(self) -> Iterator[str]:
        """Every key, in table order (a walk of the whole table: for rare jobs such as remove_all)."""
        start: int | None = 0
        while start is not None:
            found, start = self.table.scan(start, 4096)
            for key, _ in found:
                yield key

    def values(self) -> Iterator[ObjectMeta]:  # type: ignore[override]
        start: int | None = 0
        while start is not None:
            found, start = self.table.scan(start, 4096)
            for key, ref in found:
                yield ObjectMeta(self, ref, key)

    def writer_name(self, number: int) -> str:
        return self._writer_names[number]

    def keys_on(self, segment: Segment | DiskSegment) -> list[str]:
        """The keys with a replica (or a record, on a disk) on the segment: a walk of the whole table in
        C++, for unmounting a segment (rare, and the work that follows is per key anyway)."""
        return self.table.keys_on(segment.id, isinstance(segment, DiskSegment))

    def complete_many(self, keys: list[str]) -> list[bool]:
        """Per key: visible (stored, committed, not a hidden group member: one crossing for the batch)."""
        return self.table.complete_many(keys)

    # -- the ledger's ----------------------------------------------------------------------------------
    def add(self, new: NewObject) -> None:
        disk = new.disk
        ref = self.table.add(
            new.key,
            new.size,
            new.checksum,
            self._writer_number(new.writer),
            new.complete,
            new.pinned,
            new.last_access,
            new.base_replicas,
            new.hold_seq,
            [(r.segment.id, r.offset, r.slot, r.gen) for r in new.replicas],
            0 if disk is None else disk.segment.id,
            0 if disk is None else disk.offset,
        )
        if ref is None:
            raise ValueError(f"{new.key!r} is in the table already")

    def add_many(self, news: list[NewObject]) -> None:
        """add() of each, in one crossing (ValueError, nothing added, when a key is present already)."""
        writers = {w: self._writer_number(w) for w in {new.writer for new in news}}
        self.table.add_many(news, writers)

    def writer_number(self, client_id: str) -> int:
        """The table's number for a client that writes objects (numbered as first seen, never reused)."""
        return self._writer_number(client_id)

    def known_writer(self, client_id: str) -> int | None:
        """The table's number for the client, None if it never wrote (numbers none)."""
        return self._writers.get(client_id)

    def _writer_number(self, client_id: str) -> int:
        number = self._writers.get(client_id)
        if number is None:
            number = self._writers[client_id] = len(self._writer_names)
            self._writer_names.append(client_id)
        return number

    def commit_many(self, keys: list[str]) -> int:
        """Marks the objects committed; returns the bytes they add (every key must be in the table)."""
        return self.table.commit_many(keys)

    def drop_key(self, key: str) -> int:
        """Forgets the object (every view of it is dead from now on); returns the bytes it leaves the
        stored total (its size if committed, else 0), -1 if there was none."""
        return self.table.erase_key(key)

    def victim_state(self, key: str, now: float, disk_backed: bool) -> int:
        """0: it may not be evicted (absent, a put in progress, pinned; with `disk_backed`, without a disk
        record or a memory copy); 1: it may; 2: it may, but a reader holds it until its lease ends."""
        return self.table.victim_state(key, now, disk_backed)

    def add_replica(self, meta: ObjectMeta, r: Replica) -> None:
        self.table.add_copy(meta.ref, r.segment.id, r.offset, r.slot, r.gen)

    def drop_replica(self, meta: ObjectMeta, r: Replica) -> None:
        if not self.table.drop_copy(meta.ref, r.segment.id, r.offset, r.slot, r.gen):
            raise ValueError(f"{meta.key!r} has no replica {r}")

    def set_disk(self, meta: ObjectMeta, record: DiskReplica | None) -> None:
        self.table.set_disk_segment(meta.ref, 0 if record is None else record.segment.id)
        self.table.set_disk_offset(meta.ref, 0 if record is None else record.offset)
