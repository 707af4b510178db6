"""The requests of a storage node: its segments and disks mounted, restored and unmounted, and its one
channel of work (AwaitWork) with the reports it carries (declared once: kvstore.rpc.schema)."""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, NamedTuple

from kvstore.errors import InvalidArgumentError, ProtocolError
from kvstore.rpc import validate as v
from kvstore.rpc.records import (
    ChecksumCheck,
    CopyTask,
    DiskDrop,
    DiskOrder,
    FenceOrder,
    HeldReplica,
    NodeWork,
    Placement,
    _record,
)
from kvstore.rpc.schema import (
    U64,
    Flag,
    Ids,
    Int,
    Key,
    Name,
    Omitted,
    OwnToken,
    Read,
    Records,
    Request,
    Text,
    With,
    request,
)

HOLD_FIELDS = len(HeldReplica._fields)
_NO_TARGET = [0]  # appended to each hold of a master of the previous version (ten fields: no target)
_FIRST, _KEY = operator.itemgetter(0), operator.itemgetter(HeldReplica._fields.index("key"))
FENCE_BATCH = v.MAX_KEYS
"""Kills (and holds) one NodeWork reply carries at most: the node acknowledges them in one request, which
the master bounds the same (a node handed more could never acknowledge them)."""
RESULTS_BATCH = v.MAX_KEYS  # copy and disk results one AwaitWork reports at most (more go in turns)


@request
@dataclass
class MountSegment(Request):
    METHOD: ClassVar[str] = "mount_segment"
    client_id: Name
    engine: Name
    region_id: Annotated[int, Int(1, U64)]
    size: Annotated[int, Int(1, 2**62)]
    host_id: Name
    # entries of the region's fence table: at most this many live allocations
    fence_slots: Annotated[int, Int(1, 2**26)]
    # RestoreSegment calls follow: nothing is placed on it until the last one
    restoring: Annotated[bool, Flag()] = False
    token: OwnToken = ""


class RestoreRecord(NamedTuple):
    """A replica a node names back (RestoreSegment.records): HeldReplica, less seq and region. A node of
    the previous version names no `target` (read as 0: the object restores with its base count only)."""

    offset: Annotated[int, Int(0, 2**62)]
    slot: Annotated[int, Int(0, 2**26)]
    gen: Annotated[int, Int(1, 2**63)]
    key: Annotated[str, Key()]
    size: Annotated[int, Int(1, 2**62)]
    checksum: Annotated[int, Int(0, U64)]
    pinned: Annotated[bool, Flag()]
    replicas: Annotated[int, Int(1, 64)]
    target: Annotated[int, Int(0, 64)] = 0


class Removal(NamedTuple):
    """An object a master removed while a node (or its disk) held it: its key and the generation the
    removal covers."""

    key: Annotated[str, Key()]
    generation: Annotated[int, Int(1, 2**63)]


RESTORE_FIELDS = RestoreRecord._fields
REMOVALS = Records(Removal, "removals", FENCE_BATCH, "each removal is [key, generation]")


@request
@dataclass
class RestoreSegment(Request):
    """A node names replicas its segment (mounted `restoring`) still holds, as it was told them
    (HeldReplica, less seq and region): each [offset, slot, gen, key, size, checksum, pinned, replicas,
    target] (target optional: 0).
    The master takes each back as a replica of its object (creating the object when it does not know the
    key) unless it conflicts with what it knows; `last` ends the restore (the segment is placed on from
    then). Replies the slots it refused: the node fences them off and forgets them. `removed`: [key,
    generation] of objects a master removed while the node held them (kvstore.node.catalog), named before
    any record: what they cover is refused, and dropped if another node named it already."""

    METHOD: ClassVar[str] = "restore_segment"
    client_id: Name
    segment_id: Annotated[int, Int(1, U64)]
    records: Annotated[list[RestoreRecord], Records(RestoreRecord, least=len(RESTORE_FIELDS) - 1, plain=True)]
    last: Annotated[bool, Flag()]
    token: OwnToken = ""
    removed: Annotated[list[Removal], REMOVALS, Omitted.ABSENT] = field(default_factory=list)

    @staticmethod
    def decode_reply(obj: Any) -> list[int]:
        if not isinstance(obj, list) or not all(isinstance(x, int) for x in obj):
            raise ProtocolError("master sent a malformed restore_segment reply")
        return obj


def _wait(p: dict[str, Any], name: str) -> float:
    wait = v.field(p, name)
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 60:
        raise InvalidArgumentError("'wait' must be 0..60 seconds")
    return float(wait)


def _results(p: dict[str, Any], name: str) -> list[tuple[int, bool]]:
    out = []
    for d in v.bounded_list(p, name, "results", RESULTS_BATCH):
        if not isinstance(d, (list, tuple)) or len(d) != 2 or not isinstance(d[1], bool):
            raise InvalidArgumentError(f"each of {name!r} is [id, ok]")
        out.append((v.integer({"id": d[0]}, "id", 1, U64), d[1]))
    return out


Results = Annotated[list[tuple[int, bool]], Read(_results), Omitted.ABSENT]
"""(id, ok) of what a node did: copies made, disk orders run, checksums checked."""
Through = Annotated[int, Int(0, U64), Omitted.ABSENT]


@request
@dataclass
class AwaitWork(Request):
    """A storage node's one channel of work (a long poll): reports what it did since its last call, and
    waits up to `wait` seconds for more (answered at once when some is queued). `epoch`: the leader's
    term the node follows; a master of an older term (deposed) refuses it."""

    METHOD: ClassVar[str] = "await_work"
    client_id: Name
    wait: Annotated[float, Read(_wait)]
    epoch: Through = 0
    # kills applied
    acked: Annotated[list[int], Ids("kill ids", FENCE_BATCH), Omitted.ABSENT] = field(default_factory=list)
    held_through: Through = 0  # the node has every hold numbered up to this (NodeWork.holds)
    copied: Results = field(default_factory=list)  # (copy task, ok)
    disk_done: Results = field(default_factory=list)  # (disk order, ok)
    checked: Results = field(default_factory=list)  # (checksum check, the bytes intact)
    token: OwnToken = ""
    dropped_through: Through = 0  # the node has every disk drop numbered up to this (NodeWork.disk_drops)
    # The registration these reports belong to (RegisterReply.registration): reports made under another
    # one (an older master's numbering, read by a node that another thread registered again) are ignored
    registration: Through = 0

    @staticmethod
    def decode_reply(obj: Any) -> NodeWork:
        epoch, fences, holds, copies, drops, orders, checks = _record(NodeWork, obj)
        if not all(isinstance(x, list) for x in (fences, holds, copies, drops, orders, checks)):
            raise ProtocolError("master sent a malformed await_work reply")
        # One hold per put object: checked in C loops over the batch (the catalog checks every field it
        # reads back), made records by tuple.__new__ in one (a Python call each was a fifth of a node's
        # work per put)
        lengths: set[int] = set()
        if holds and not (
            set(map(type, holds)) == {list}
            and (lengths := set(map(len, holds))) <= {HOLD_FIELDS - 1, HOLD_FIELDS}
            and set(map(type, map(_FIRST, holds))) == {int}
            and set(map(type, map(_KEY, holds))) == {str}
        ):
            raise ProtocolError("master sent a malformed HeldReplica")
        if HOLD_FIELDS - 1 in lengths:  # (no target: 0)
            holds = [h if len(h) == HOLD_FIELDS else h + _NO_TARGET for h in holds]
        held = list(map(tuple.__new__, itertools.repeat(HeldReplica), holds))
        tasks = []
        for t in copies:
            task = _record(CopyTask, t)
            tasks.append(task._replace(source=_record(Placement, task.source)))
        disk_orders = []
        for o in orders:
            order = _record(DiskOrder, o)
            disk_orders.append(order._replace(memory=_record(Placement, order.memory)))
        disk_drops = [_record(DiskDrop, d) for d in drops]
        if any(
            type(d.offset) is not int
            or type(d.key) is not str
            or type(d.seq) is not int
            or type(d.buried) is not int
            or not 0 <= d.buried <= 2**63
            for d in disk_drops
        ):
            raise ProtocolError("master sent a malformed DiskDrop")
        fence_orders = [_record(FenceOrder, f) for f in fences]
        if any(
            not isinstance(f.buried, list) or len(f.buried) != len(f.slots) or {*map(type, f.buried)} - {int}
            for f in fence_orders
        ):
            raise ProtocolError("master sent a malformed FenceOrder")
        checksum_checks = [_record(ChecksumCheck, c) for c in checks]
        if not all(type(x) is int for c in checksum_checks for x in c):
            raise ProtocolError("master sent a malformed ChecksumCheck")
        return NodeWork(epoch, fence_orders, held, tasks, disk_drops, disk_orders, checksum_checks)


def _absolute_path(p: dict[str, Any], name: str) -> str:
    path = v.text(p, name, 4096)
    if not path.startswith("/") or "\0" in path:
        raise InvalidArgumentError("'path' must be an absolute path")
    return path


@request
@dataclass
class MountDisk(Request):
    """A node offers a disk tier of `size` bytes: its file (absolute path), which only it writes. Readers
    on its host may read records from the file directly; others read them from `file_region`, the file
    registered with the node's engine `engine` as a region of kind file (0: none)."""

    METHOD: ClassVar[str] = "mount_disk"
    client_id: Name
    size: Annotated[int, Int(4096, 2**62)]
    host_id: Name
    path: Annotated[str, Read(_absolute_path)]
    engine: Annotated[str, Text(), With("file_region")] = ""
    file_region: Annotated[int, Int(0, U64), Omitted.ABSENT] = 0
    # RestoreDisk calls follow: nothing is demoted to it until the last one
    restoring: Annotated[bool, Flag()] = False
    token: OwnToken = ""


class DiskRecord(NamedTuple):
    """A record a restarted node's disk offers (RestoreDisk.records). `gen`: the generation of the
    replica it was written from (0, the oldest, for a record written before it was named)."""

    offset: Annotated[int, Int(0, 2**62)]
    key: Annotated[str, Key()]
    size: Annotated[int, Int(1, 2**62)]
    checksum: Annotated[int, Int(0, U64)]
    gen: Annotated[int, Int(0, U64)] = 0


@request
@dataclass
class RestoreDisk(Request):
    """A restarted node offers the records its disk still holds intact (checked by the node): each
    [offset, key, size, checksum, generation] (the generation of the replica the record was written from:
    one the master removed since is refused; a record written before it was named is 0, the oldest).
    Keys the master already knows are left alone. Replies how many were taken back. `last` ends the
    disk's restore (demotions to it begin). `removed`: [key, generation] of objects a master removed
    while the disk held their records (DiskDrop.buried, kept in its index), as RestoreSegment's."""

    METHOD: ClassVar[str] = "restore_disk"
    client_id: Name
    records: Annotated[
        list[DiskRecord],
        Records(DiskRecord, shape="each record is [offset, key, size, checksum, generation]", least=4),
    ]
    last: Annotated[bool, Flag(True)] = True
    token: OwnToken = ""
    removed: Annotated[list[Removal], REMOVALS, Omitted.ABSENT] = field(default_factory=list)


def _reason(p: dict[str, Any], name: str) -> str:
    reason = v.field(p, name)
    if not isinstance(reason, str) or len(reason.encode()) > 1024:
        raise InvalidArgumentError("'reason' must be a string of at most 1024 bytes")
    return reason


@request
@dataclass
class DiskDegraded(Request):
    """A node's disk fails writes (I/O errors, a full file system, read-only): the master demotes nothing
    to it until the node says writes work again (`reason` "")."""

    METHOD: ClassVar[str] = "disk_degraded"
    client_id: Name
    reason: Annotated[str, Read(_reason)]
    token: OwnToken = ""


@request
@dataclass
class UnmountSegment(Request):
    METHOD: ClassVar[str] = "unmount_segment"
    client_id: Name
    segment_id: Annotated[int, Int(1, U64)]
    token: OwnToken = ""
