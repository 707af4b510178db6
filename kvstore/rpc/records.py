"""The records inside master replies (named tuples: msgpack carries them as arrays) and their decoding
helpers; kvstore.rpc.messages re-exports them beside the requests that return them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from kvstore.errors import ProtocolError


class Placement(NamedTuple):
    """Where a put writes one replica."""

    engine: str  # transfer engine segment name, "host:port"
    region_id: int
    offset: int
    slot: int  # the allocation's fence: every transfer names it (kvstore.master.fences)
    gen: int


class ReplicaLocation(NamedTuple):
    """Where a reader finds one replica."""

    engine: str
    region_id: int
    offset: int
    host_id: str
    slot: int
    gen: int


class DiskLocation(NamedTuple):
    """Where a reader on the disk's host reads a disk-only object itself: the node's disk file and the
    record's offset in it (the object's bytes start one DISK_PAGE further)."""

    host_id: str
    path: str
    offset: int


class ObjectLocation(NamedTuple):
    size: int
    checksum: int
    replicas: list[ReplicaLocation]
    disk: DiskLocation | None = None  # set only for a disk-only object its reader may read directly


DISK_PAGE = 4096  # direct-I/O unit: disk records start and end on it


def record_bytes(size: int) -> int:
    """Disk space of one object's record: one header page (the node's), then the bytes, page-padded.
    Master (which places records) and node (which writes them) agree on it here."""
    return DISK_PAGE + -(-size // DISK_PAGE) * DISK_PAGE


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
    its index, so a restart does not offer it back."""

    offset: int
    key: str


class DiskWork(NamedTuple):
    orders: list[DiskOrder]
    drops: list[DiskDrop]  # applied before the orders (an order may reuse a dropped record's space)


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


class RegisterReply(NamedTuple):
    heartbeat_interval: float
    client_ttl: float
    lease_ttl: float
    generation: int  # every allocation handed out so far has a generation <= this


class FenceOrder(NamedTuple):
    """Allocations of one of the node's regions to fence off, and the ids to acknowledge them by."""

    region_id: int
    kills: list[int]
    slots: list[int]
    gens: list[int]


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
    replicas: int  # the count the object was put with


class FenceWork(NamedTuple):
    """The reply to AwaitFences: kills to apply, and replicas the node now holds."""

    orders: list[FenceOrder]
    holds: Sequence[HeldReplica | tuple[Any, ...]]  # the master sends plain tuples of its fields


class HeartbeatReply(NamedTuple):
    known: bool  # False: the master forgot this client, which must register (and mount) again
    tasks: list[CopyTask]


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


def _record(cls: Any, obj: Any) -> Any:
    if not isinstance(obj, (list, tuple)) or len(obj) != len(cls._fields):
        raise ProtocolError(f"master sent a malformed {cls.__name__}")
    return cls._make(obj)


def _disk_location(obj: Any) -> DiskLocation:
    host_id, path, offset = _record(DiskLocation, obj)
    if not isinstance(host_id, str) or not isinstance(path, str) or not path.startswith("/"):
        raise ProtocolError("master sent a malformed DiskLocation")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or offset % DISK_PAGE:
        raise ProtocolError("master sent a malformed DiskLocation")
    return DiskLocation(host_id, path, offset)


def _items(obj: Any, value: Any = None) -> list[ItemResult]:
    if not isinstance(obj, list):
        raise ProtocolError("master sent a malformed batch reply")
    out = []
    for item in obj:
        code, message, payload = _record(ItemResult, item)
        out.append(ItemResult(code, message, value(payload) if value and payload is not None else payload))
    return out
