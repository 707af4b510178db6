"""The records inside master replies (named tuples: msgpack carries them as arrays) and their decoding
helpers; kvstore.rpc.messages re-exports them beside the requests that return them."""

from __future__ import annotations

import functools
import itertools
import operator
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

from kvstore.errors import ProtocolError
from kvstore.rpc.disk_record import PAGE


class Placement(NamedTuple):
    """Where a put writes one replica."""

    engine: str  # transfer engine segment name, "host:port"
    region_id: int
    offset: int
    slot: int  # the allocation's fence: every transfer names it (kvstore.master.fences)
    gen: int


MEMORY, DISK = 0, 1  # the tiers a copy of an object lives in (Location.tier)
TIERS = (MEMORY, DISK)


class Location(NamedTuple):
    """Where a reader finds one copy of an object, in any tier: a memory replica, or a disk record."""

    tier: int  # MEMORY | DISK
    host_id: str
    engine: str  # the transfer engine serving the bytes, "host:port"; "": read only from `path`
    region_id: int
    offset: int  # of the object's bytes in the region (or in the file at `path`)
    slot: int  # the allocation's fence: every transfer names it; (0, 0) unfenced (the checksum guards it)
    gen: int
    path: str = ""  # a disk record's file on host_id, set for a reader on that host: it reads it itself


class ObjectLocation(NamedTuple):
    size: int
    checksum: int
    locations: list[Location]


class DiskOrder(NamedTuple):
    """Disk work for a node. kind "demote": read the object from `memory` (any node's replica) and write
    its record at `disk_offset`. kind "load": read the record at `disk_offset` and copy the object into
    `memory`, an allocation of this node's own segment. Either way the bytes are verified (key, size,
    checksum) before the node reports success."""

    order: int
    kind: str  # "demote" | "load"
    key: str
    size: int
    checksum: int
    disk_offset: int  # the record's place in the node's disk file (a header page, then the bytes)
    memory: Placement


class DiskDrop(NamedTuple):
    """A record the master freed (its object removed, or evicted from disk): the node marks it dead in
    its index, so a restart does not offer it back. Sent until the node acknowledges it (AwaitWork's
    `dropped_through`: numbered in the order they are queued). `buried`: the generation the key's removal
    covers (0: none): the node keeps it and names it to the next master (RestoreDisk.removed)."""

    offset: int
    key: str
    seq: int
    buried: int = 0


class DiskResult(NamedTuple):
    order: int
    ok: bool


class ItemResult(NamedTuple):
    """The outcome for one item of a batch: code 0 and a value, or an error code and its message."""

    code: int
    message: str
    value: Any


class CopyTask(NamedTuple):
    """A replica the master placed on a node's segment: the node reads it from `source`."""

    task: int
    key: str
    size: int
    checksum: int
    source: Placement
    segment: int
    offset: int
    slot: int
    gen: int


class ChecksumCheck(NamedTuple):
    """The master asks a node whether the bytes of one of its allocations match an object's checksum (a
    reader reported the replica corrupt; kvstore.master.corrupt_checks)."""

    check: int
    region_id: int
    offset: int
    size: int
    checksum: int


class RegisterReply(NamedTuple):
    heartbeat_interval: float
    client_ttl: float
    lease_ttl: float
    generation: int  # every allocation handed out so far has a generation <= this
    # This registration's number (random, kept while the master knows the client): a node's reports
    # (AwaitWork) name it, so acknowledgements counted against another master's numbering are ignored
    registration: int


class FenceOrder(NamedTuple):
    """Allocations of one of the node's regions to fence off, and the ids to acknowledge them by. `buried`:
    per kill, the generation the removal of its object covers (kvstore.master.tombstones; 0 when the
    object lives on): the node remembers those keys as removed and names them to the next master."""

    region_id: int
    kills: list[int]
    slots: list[int]
    gens: list[int]
    buried: list[int]


class HeldReplica(NamedTuple):
    """A committed replica on a node's segment, as its node keeps it (kvstore.master.holds): enough for a
    master that lost its table to take the object back from the node."""

    seq: int  # the master's numbering of holds: the node acknowledges them up to one
    region_id: int
    offset: int
    slot: int
    gen: int
    key: str
    size: int
    checksum: int
    pinned: bool
    replicas: int  # the count its put asked for (the base its master keeps a cool object at)
    # A user's pinned count (change_replica; 0: none, its heat decides): sent as an eleventh field, which a
    # master of the previous version does not send (the node reads 0)
    target: int = 0


class NodeWork(NamedTuple):
    """The reply to a node's AwaitWork, every kind of work for it in one: kills to apply, replicas it now
    holds, replica copies to make, disk records to forget and disk orders to run (in that order: a drop
    frees space a later order may reuse), and replicas to check. `epoch`: the leader's term that sends it
    (0 without HA)."""

    epoch: int
    fences: list[FenceOrder]
    # the master's are encoded already (kvstore.rpc.framing.Packed: its C++ hold book's), a node reads records
    holds: Sequence[HeldReplica | tuple[Any, ...]] | bytes
    copies: list[CopyTask]
    disk_drops: list[DiskDrop]
    disk_orders: list[DiskOrder]
    checks: list[ChecksumCheck]  # replicas reported corrupt, to hash and answer


class HeartbeatReply(NamedTuple):
    known: bool  # False: the master forgot this client, which must register (and mount) again


class PrefixMatch(NamedTuple):
    matched: int
    """Leading keys stored."""
    replicas: list[list[str]]
    """For each matched key, the segments (transfer engine names) holding a replica."""
    per_node: dict[str, int]
    """For each segment, how many leading keys it holds itself."""


class HelloReply(NamedTuple):
    version: int
    epoch: int  # the leader's term in its cluster (etcd's revision of its leader key); 0 without HA
    # The part of the key space the master serves (kvstore.cluster.shards): a trailing pair only a
    # sharded master sends, so a one-shard master's reply (and a master's before sharding) reads 0 of 1
    shard: int = 0
    shards: int = 1


def _record(cls: Any, obj: Any) -> Any:
    if not isinstance(obj, (list, tuple)) or len(obj) != len(cls._fields):
        raise ProtocolError(f"master sent a malformed {cls.__name__}")
    return cls._make(obj)


def _location(obj: Any) -> Location:
    loc = _record(Location, obj)
    tier, host_id, engine, region_id, offset, slot, gen, path = loc
    if type(tier) is not int or tier not in TIERS:
        raise ProtocolError("master sent a malformed Location")
    if not all(isinstance(x, str) for x in (host_id, engine, path)):
        raise ProtocolError("master sent a malformed Location")
    if not all(type(x) is int and 0 <= x < _U64_END for x in (region_id, offset, slot, gen)):
        raise ProtocolError("master sent a malformed Location")
    if not engine and not (path.startswith("/") and offset % PAGE == 0):  # a reader reads it from path
        raise ProtocolError("master sent a malformed Location")
    return loc


def _object_location(obj: Any) -> ObjectLocation:
    size, checksum, locations = _record(ObjectLocation, obj)
    if not (_all_ints_below((size,), _SIZE_END) and _all_ints_below((checksum,), _U64_END)):
        raise ProtocolError("master sent a malformed ObjectLocation")
    if not isinstance(locations, list):
        raise ProtocolError("master sent a malformed ObjectLocation")
    return ObjectLocation(size, checksum, [_location(x) for x in locations])


def object_locations(obj: Any) -> list[ObjectLocation | None]:
    """A get's reply: per key its ObjectLocation, or None for a miss. A client decodes one on every
    uncached get, so the common shape (plain lists, ints and strs, every copy served by an engine) is
    checked and made in C loops, with no Python step per key or copy; any other reply goes record by
    record, which refuses what is malformed (the same records either way)."""
    if not isinstance(obj, list):
        raise ProtocolError("master sent a malformed get_replicas reply")
    found = _object_locations_in_c_loops(obj)
    if found is None:
        found = [None if entry is None else _object_location(entry) for entry in obj]
    return found


def _object_locations_in_c_loops(obj: list[Any]) -> list[ObjectLocation | None] | None:
    """The reply's records, or None where it is not of the common shape (every check _object_location
    makes, made a column at a time)."""
    hits = list(filter(_is_not_none, obj))
    if not hits:
        return list(obj)
    if not _all_lists_of(hits, len(ObjectLocation._fields)):
        return None
    sizes, checksums, copies = zip(*hits, strict=True)
    if not (_all_ints_below(sizes, _SIZE_END) and _all_ints_below(checksums, _U64_END)):
        return None
    if not _all_lists_of(list(copies), None):
        return None
    flat = list(itertools.chain.from_iterable(copies))
    if not (_all_lists_of(flat, len(Location._fields)) and _served_by_engines(flat)):
        return None
    lists = map(list, map(map, itertools.repeat(_new_location), copies))
    made: list[ObjectLocation | None] = list(
        map(_new_tuple, itertools.repeat(ObjectLocation), zip(sizes, checksums, lists, strict=True))
    )
    if len(made) == len(obj):
        return made
    out: list[ObjectLocation | None] = [None] * len(obj)
    at_hits = itertools.compress(itertools.count(), map(operator.is_not, obj, itertools.repeat(None)))
    deque(map(out.__setitem__, at_hits, made), maxlen=0)
    return out


def _served_by_engines(flat: list[Any]) -> bool:
    """Every copy (a list of Location's fields) of the types and bounds _location checks, and served by a
    transfer engine (a disk record a reader reads from its path has a rule of its own: record by record)."""
    if not flat:
        return True
    tiers, hosts, engines, region_ids, offsets, slots, gens, paths = zip(*flat, strict=True)
    return (
        set(map(type, tiers)) == {int}
        and _TIER_SET.issuperset(tiers)
        and set(map(type, itertools.chain(hosts, engines, paths))) == {str}
        and all(engines)
        and all(_all_ints_below(column, _U64_END) for column in (region_ids, offsets, slots, gens))
    )


def _items(obj: Any, value: Any = None) -> list[ItemResult]:
    """A batch reply's [code, message, payload] items (one record made per item: a put batch has 1,000s)."""
    if not isinstance(obj, list):
        raise ProtocolError("master sent a malformed batch reply")
    if value is None and _all_lists_of(obj, 3):  # the common shape, checked and made in C loops
        return list(map(_new_tuple, itertools.repeat(ItemResult), obj))
    make = ItemResult._make
    out = []
    for item in obj:
        if type(item) not in (list, tuple) or len(item) != 3:
            raise ProtocolError("master sent a malformed ItemResult")
        if value is not None and item[2] is not None:
            item = (item[0], item[1], value(item[2]))
        out.append(make(item))
    return out


def placed_items(obj: Any) -> list[ItemResult]:
    """A put start's items, each payload (when not None) a list of Placements: made in C loops but for
    one step per item, where a record per placement made in Python cost most of a small put's decoding."""
    if isinstance(obj, list) and _all_lists_of(obj, 3):
        payloads = list(map(_payload, obj))
        placed = [p for p in payloads if p is not None]
        if _all_lists_of(placed, None):
            flat = list(itertools.chain.from_iterable(placed))
            if _all_lists_of(flat, len(Placement._fields)):
                new, record, cls = _new_tuple, Placement, ItemResult
                return [
                    new(cls, (c, msg, None if p is None else list(map(new, itertools.repeat(record), p))))
                    for c, msg, p in obj
                ]
    return _items(obj, _placements)


def _placements(obj: Any) -> list[Placement]:
    if not isinstance(obj, list):
        raise ProtocolError("master sent a malformed Placement list")
    return [_record(Placement, r) for r in obj]


_new_tuple = tuple.__new__  # (a NamedTuple from a sequence in one C call)
_new_location = functools.partial(_new_tuple, Location)
_payload = operator.itemgetter(2)
_is_not_none = functools.partial(operator.is_not, None)
_U64_END = 2**64
_SIZE_END = 2**63  # (a put's size is at most 2**63 - 1: PutItem)
_TIER_SET = frozenset(TIERS)


def _all_lists_of(values: list[Any], length: int | None) -> bool:
    """Every value a list (of `length` items, unless None); true of none."""
    if not values:
        return True
    return set(map(type, values)) == {list} and (length is None or set(map(len, values)) == {length})


def _all_ints_below(values: Sequence[Any], end: int) -> bool:
    """Every value an int (not a bool) in [0, end); true of none."""
    return not values or (set(map(type, values)) == {int} and min(values) >= 0 and max(values) < end)
