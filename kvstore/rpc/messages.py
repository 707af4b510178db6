"""Every master RPC as a declared record (plain dataclasses: a frozen one costs ~1 µs more to build on
the master's hot path): one request class per method, built (``params``) and parsed
(``parse``, which validates every field a peer sends) here and nowhere else; replies are the named
tuples of kvstore.rpc.records (re-exported here) decoded by the request's ``decode_reply``.

A client opens with ``Hello``: a master speaking another PROTOCOL_VERSION refuses it with a clear error.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import secrets
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, NamedTuple

from kvstore.errors import InvalidArgumentError, PermissionDeniedError, ProtocolError
from kvstore.rpc import node_proof
from kvstore.rpc import validate as v
from kvstore.rpc.records import (  # noqa: F401  re-exported: callers name them messages.X
    DISK,
    MEMORY,
    ChecksumCheck,
    CopyTask,
    DiskDrop,
    DiskOrder,
    DiskResult,
    FenceOrder,
    HeartbeatReply,
    HeldReplica,
    HelloReply,
    ItemResult,
    Location,
    NodeWork,
    ObjectLocation,
    Placement,
    PrefixMatch,
    RegisterReply,
    _items,
    _object_location,
    _record,
    placed_items,
)

# 3: allocations carry fence (slot, generation); AwaitFences. 4: disk tier. 5: direct disk reads.
# 6: nodes are told what they hold (FenceWork.holds) and name it to a master that lost it (RestoreSegment)
# 7: one Location record for every tier (memory replicas and disk records alike); one channel of node
# work (AwaitWork: fences, holds, copies, disk orders, and their results), which carries the epoch
# 8: heartbeats carry the NIC paths of the process's transfer engine (Heartbeat.paths)
# 9: a client registers with a token of its own, and requests in its name carry it; a node checks a
# replica reported corrupt before it is dropped (NodeWork.checks, AwaitWork.checked)
# 10: a node's identity names its key's fingerprint and its registration proves the key
# (RegisterClient.node_key); a client id is its token's (client_id_for); removals say who removes
# (Remove/RemoveAll.client_id); admin rights are proved over a master nonce (AdminChallenge, AdminProve);
# removals are durable across restores: kills name their tombstone (FenceOrder.buried), nodes name the
# removals they keep (RestoreSegment.removed) and disk records their generation (RestoreDisk), disk drops
# are numbered, name their removal and are acknowledged once persisted (DiskDrop.seq and .buried,
# AwaitWork.dropped_through), and a disk names the removals it keeps (RestoreDisk.removed); a node's
# reports name the registration they count in (RegisterReply.registration, AwaitWork.registration)
# 11: a node's registration signs a master nonce with its key instead of carrying the key
# (NodeChallenge; RegisterClient.node_public, node_nonce, node_proof: kvstore.rpc.node_proof)
PROTOCOL_VERSION = 11
U64 = 2**64 - 1
HOLD_FIELDS = len(HeldReplica._fields)
_FIRST, _KEY = operator.itemgetter(0), operator.itemgetter(HeldReplica._fields.index("key"))


def new_token() -> str:
    """A registration token (RegisterClient.token): 128 random bits."""
    return secrets.token_hex(16)


def client_id_for(token: str) -> str:
    """The client id a registration token gives (RegisterClient.client_id must be it): nobody registers
    an id without the token that made it, so no member can take another's id first (after a master
    restart, before its owner registers again)."""
    return hashlib.sha256(b"kvstore-client-id\0" + token.encode()).hexdigest()[:32]


def node_key_fingerprint(node_key: str) -> str:
    """What a node's identity names of its key (RegisterClient.node_id ends "#<this>"): the fingerprint
    of the public half of the key's pair (kvstore.rpc.node_proof), so who registers that identity must
    sign with the key, and knowing the identity or anything a registration carries is not enough to take
    it over."""
    return node_public_fingerprint(node_proof.public_of(node_key))


def node_public_fingerprint(public: str) -> str:
    return hashlib.sha256(b"kvstore-node-key\0" + public.encode()).hexdigest()[:32]


# -- requests ---------------------------------------------------------------------------------------
class Request:
    """Base of the request records. ``METHOD`` names it on the wire."""

    METHOD: ClassVar[str]
    FIELDS: ClassVar[frozenset[str]] = frozenset()  # the parameter names, set once per class below

    def params(self) -> dict[str, Any]:
        return dict(vars(self))  # the dataclass fields, without a per-call fields() walk

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Request:
        raise NotImplementedError

    @staticmethod
    def decode_reply(obj: Any) -> Any:
        return obj


@dataclass
class Hello(Request):
    METHOD: ClassVar[str] = "hello"
    version: int = PROTOCOL_VERSION

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Hello:
        return cls(v.integer(p, "version", 0, 2**31))

    @staticmethod
    def decode_reply(obj: Any) -> HelloReply:
        return _record(HelloReply, obj)


@dataclass
class RegisterClient(Request):
    METHOD: ClassVar[str] = "register_client"
    client_id: str
    host_id: str
    # A storage node's identity, "<host>/<name>#<node_key_fingerprint(node_key)>": it supersedes an
    # older registration with the same one (that node restarted)
    node_id: str = ""
    # The process's secret for its registration (new_token()): every request in its name carries it
    # (OWN_NAME), and registering its id again takes the same one. Chosen by the client: it never crosses
    # back.
    token: str = ""
    # With node_id: the public half of the node key's pair (its fingerprint ends node_id), the nonce
    # NodeChallenge gave, and the signature over them (kvstore.rpc.node_proof); the key never crosses.
    node_public: str = ""
    node_nonce: str = ""
    node_proof: str = ""

    @classmethod
    def parse(cls, p: dict[str, Any]) -> RegisterClient:
        client_id, token = v.text(p, "client_id"), v.token(p, "token")
        if client_id != client_id_for(token):
            raise PermissionDeniedError(
                f"client id {client_id!r} is not its token's (kvstore.rpc.messages.client_id_for)"
            )
        host_id = v.text(p, "host_id")
        node_id = v.text(p, "node_id") if p.get("node_id") else ""
        if not node_id:
            return cls(client_id, host_id, "", token)
        public, nonce, proof = (
            v.text(p, name, node_proof.MAX_PUBLIC_CHARS) if p.get(name) else ""
            for name in ("node_public", "node_nonce", "node_proof")
        )
        if node_id.rpartition("#")[2] != node_public_fingerprint(public) or not node_proof.verify(
            public, node_proof.message(nonce, client_id, node_id), proof
        ):
            raise PermissionDeniedError(
                f"node identity {node_id!r} is not proved: its registration must be signed with its key"
            )
        return cls(client_id, host_id, node_id, token, public, nonce, proof)

    @staticmethod
    def decode_reply(obj: Any) -> RegisterReply:
        return _record(RegisterReply, obj)


class NicPaths(NamedTuple):
    """A process's paths that leave on one local NIC ("default": where the kernel routes), summed over
    its peers: what they carried and how many are up or down (for the master's /metrics)."""

    nic: str
    bytes: int
    slices: int
    failures: int
    failovers: int
    up: int
    down: int


MAX_NICS = 64


def _nic_paths(p: dict[str, Any]) -> list[NicPaths]:
    rows = v.bounded_list(p, "paths", "NICs", MAX_NICS)
    out = []
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != len(NicPaths._fields)
            or not isinstance(row[0], str)
            or not 0 < len(row[0].encode()) <= 64
            or not all(type(n) is int and 0 <= n < 2**63 for n in row[1:])
        ):
            raise InvalidArgumentError(
                "each of 'paths' is [nic, bytes, slices, failures, failovers, up, down]"
            )
        out.append(NicPaths(*row))
    return out


@dataclass
class Heartbeat(Request):
    METHOD: ClassVar[str] = "heartbeat"
    client_id: str
    touched: list[str] | None = None  # keys this client read from leased locations since the last one
    paths: list[NicPaths] | None = None  # its engine's NIC paths (telemetry)
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Heartbeat:
        touched = v.keys(p, "touched") if p.get("touched") is not None else None
        paths = _nic_paths(p) if p.get("paths") is not None else None
        return cls(v.text(p, "client_id"), touched, paths)

    @staticmethod
    def decode_reply(obj: Any) -> HeartbeatReply:
        (known,) = _record(HeartbeatReply, obj)
        return HeartbeatReply(bool(known))


@dataclass
class CloseClient(Request):
    METHOD: ClassVar[str] = "close_client"
    client_id: str
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> CloseClient:
        return cls(v.text(p, "client_id"))


@dataclass
class MountSegment(Request):
    METHOD: ClassVar[str] = "mount_segment"
    client_id: str
    engine: str
    region_id: int
    size: int
    host_id: str
    fence_slots: int  # entries of the region's fence table: at most this many live allocations
    restoring: bool = False  # RestoreSegment calls follow: nothing is placed on it until the last one
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> MountSegment:
        return cls(
            v.text(p, "client_id"),
            v.text(p, "engine"),
            v.integer(p, "region_id", 1, U64),
            v.integer(p, "size", 1, 2**62),
            v.text(p, "host_id"),
            v.integer(p, "fence_slots", 1, 2**26),
            v.flag(p, "restoring"),
        )


RESTORE_FIELDS = ("offset", "slot", "gen", "key", "size", "checksum", "pinned", "replicas")
# Per field: (low, high) of an integer, "key", or "flag" (what RestoreSegment.parse checks one by one).
RESTORE_BOUNDS: tuple[tuple[int, int] | str, ...] = (
    (0, 2**62),
    (0, 2**26),
    (1, 2**63),
    "key",
    (1, 2**62),
    (0, U64),
    "flag",
    (1, 64),
)


def _removed(p: dict[str, Any]) -> list[tuple[str, int]]:
    out = []
    for r in v.bounded_list(p, "removed", "removals", FENCE_BATCH):
        if not isinstance(r, (list, tuple)) or len(r) != 2:
            raise InvalidArgumentError("each removal is [key, generation]")
        out.append((v.key(r[0]), v.integer({"generation": r[1]}, "generation", 1, 2**63)))
    return out


@dataclass
class RestoreSegment(Request):
    """A node names replicas its segment (mounted `restoring`) still holds, as it was told them
    (HeldReplica, less seq and region): each [offset, slot, gen, key, size, checksum, pinned, replicas].
    The master takes each back as a replica of its object (creating the object when it does not know the
    key) unless it conflicts with what it knows; `last` ends the restore (the segment is placed on from
    then). Replies the slots it refused: the node fences them off and forgets them. `removed`: [key,
    generation] of objects a master removed while the node held them (kvstore.node.catalog), named before
    any record: what they cover is refused, and dropped if another node named it already."""

    METHOD: ClassVar[str] = "restore_segment"
    client_id: str
    segment_id: int
    records: list[tuple[int, int, int, str, int, int, bool, int]]
    last: bool
    token: str = ""  # the client's registration token (OWN_NAME)
    removed: list[tuple[str, int]] = field(default_factory=list)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> RestoreSegment:
        raw = v.bounded_list(p, "records", "")
        plain = v.plain_records(raw, RESTORE_BOUNDS)
        client_id, segment_id = v.text(p, "client_id"), v.integer(p, "segment_id", 1, U64)
        removed = _removed(p) if "removed" in p else []
        if plain is not None:  # the usual case, checked in C loops over the batch
            return cls(client_id, segment_id, plain, v.flag(p, "last"), "", removed)
        records = []
        for r in raw:
            if not isinstance(r, (list, tuple)) or len(r) != len(RESTORE_FIELDS):
                raise InvalidArgumentError("each record is [" + ", ".join(RESTORE_FIELDS) + "]")
            f = dict(zip(RESTORE_FIELDS, r, strict=True))
            records.append(
                (
                    v.integer(f, "offset", 0, 2**62),
                    v.integer(f, "slot", 0, 2**26),
                    v.integer(f, "gen", 1, 2**63),
                    v.key(f["key"]),
                    v.integer(f, "size", 1, 2**62),
                    v.integer(f, "checksum", 0, U64),
                    v.flag(f, "pinned"),
                    v.integer(f, "replicas", 1, 64),
                )
            )
        return cls(client_id, segment_id, records, v.flag(p, "last"), "", removed)

    @staticmethod
    def decode_reply(obj: Any) -> list[int]:
        if not isinstance(obj, list) or not all(isinstance(x, int) for x in obj):
            raise ProtocolError("master sent a malformed restore_segment reply")
        return obj


FENCE_BATCH = v.MAX_KEYS
"""Kills (and holds) one NodeWork reply carries at most: the node acknowledges them in one request, which
the master bounds the same (a node handed more could never acknowledge them)."""
RESULTS_BATCH = v.MAX_KEYS  # copy and disk results one AwaitWork reports at most (more go in turns)


def _wait(p: dict[str, Any]) -> float:
    wait = v.field(p, "wait")
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


@dataclass
class AwaitWork(Request):
    """A storage node's one channel of work (a long poll): reports what it did since its last call, and
    waits up to `wait` seconds for more (answered at once when some is queued). `epoch`: the leader's
    term the node follows; a master of an older term (deposed) refuses it."""

    METHOD: ClassVar[str] = "await_work"
    client_id: str
    wait: float
    epoch: int = 0
    acked: list[int] = field(default_factory=list)  # kills applied
    held_through: int = 0  # the node has every hold numbered up to this (NodeWork.holds)
    copied: list[tuple[int, bool]] = field(default_factory=list)  # (copy task, ok)
    disk_done: list[tuple[int, bool]] = field(default_factory=list)  # (disk order, ok)
    checked: list[tuple[int, bool]] = field(default_factory=list)  # (checksum check, the bytes intact)
    token: str = ""  # the client's registration token (OWN_NAME)
    dropped_through: int = 0  # the node has every disk drop numbered up to this (NodeWork.disk_drops)
    # The registration these reports belong to (RegisterReply.registration): reports made under another
    # one (an older master's numbering, read by a node that another thread registered again) are ignored
    registration: int = 0

    @classmethod
    def parse(cls, p: dict[str, Any]) -> AwaitWork:
        return cls(
            v.text(p, "client_id"),
            _wait(p),
            v.integer(p, "epoch", 0, U64) if "epoch" in p else 0,
            v.ids(p, "acked", "kill ids", FENCE_BATCH) if "acked" in p else [],
            v.integer(p, "held_through", 0, U64) if "held_through" in p else 0,
            _results(p, "copied") if "copied" in p else [],
            _results(p, "disk_done") if "disk_done" in p else [],
            _results(p, "checked") if "checked" in p else [],
            dropped_through=v.integer(p, "dropped_through", 0, U64) if "dropped_through" in p else 0,
            registration=v.integer(p, "registration", 0, U64) if "registration" in p else 0,
        )

    @staticmethod
    def decode_reply(obj: Any) -> NodeWork:
        epoch, fences, holds, copies, drops, orders, checks = _record(NodeWork, obj)
        if not all(isinstance(x, list) for x in (fences, holds, copies, drops, orders, checks)):
            raise ProtocolError("master sent a malformed await_work reply")
        # One hold per put object: checked in C loops over the batch (the catalog checks every field it
        # reads back), made records by tuple.__new__ in one (a Python call each was a fifth of a node's
        # work per put)
        if holds and not (
            set(map(type, holds)) == {list}
            and set(map(len, holds)) == {HOLD_FIELDS}
            and set(map(type, map(_FIRST, holds))) == {int}
            and set(map(type, map(_KEY, holds))) == {str}
        ):
            raise ProtocolError("master sent a malformed HeldReplica")
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


@dataclass
class MountDisk(Request):
    """A node offers a disk tier of `size` bytes: its file (absolute path), which only it writes. Readers
    on its host may read records from the file directly; others read them from `file_region`, the file
    registered with the node's engine `engine` as a region of kind file (0: none)."""

    METHOD: ClassVar[str] = "mount_disk"
    client_id: str
    size: int
    host_id: str
    path: str
    engine: str = ""
    file_region: int = 0
    restoring: bool = False  # RestoreDisk calls follow: nothing is demoted to it until the last one
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> MountDisk:
        path = v.text(p, "path", 4096)
        if not path.startswith("/") or "\0" in path:
            raise InvalidArgumentError("'path' must be an absolute path")
        file_region = v.integer(p, "file_region", 0, U64) if "file_region" in p else 0
        engine = v.text(p, "engine") if file_region else ""
        return cls(
            v.text(p, "client_id"),
            v.integer(p, "size", 4096, 2**62),
            v.text(p, "host_id"),
            path,
            engine,
            file_region,
            v.flag(p, "restoring"),
        )


@dataclass
class RestoreDisk(Request):
    """A restarted node offers the records its disk still holds intact (checked by the node): each
    [offset, key, size, checksum, generation] (the generation of the replica the record was written from:
    one the master removed since is refused; a record written before it was named is 0, the oldest).
    Keys the master already knows are left alone. Replies how many were taken back. `last` ends the
    disk's restore (demotions to it begin). `removed`: [key, generation] of objects a master removed
    while the disk held their records (DiskDrop.buried, kept in its index), as RestoreSegment's."""

    METHOD: ClassVar[str] = "restore_disk"
    client_id: str
    records: list[tuple[int, str, int, int, int]]
    last: bool = True
    token: str = ""  # the client's registration token (OWN_NAME)
    removed: list[tuple[str, int]] = field(default_factory=list)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> RestoreDisk:
        raw = v.bounded_list(p, "records", "")
        records = []
        for r in raw:
            if not isinstance(r, (list, tuple)) or len(r) not in (4, 5):
                raise InvalidArgumentError("each record is [offset, key, size, checksum, generation]")
            f = {"offset": r[0], "size": r[2], "checksum": r[3], "gen": r[4] if len(r) == 5 else 0}
            records.append(
                (
                    v.integer(f, "offset", 0, 2**62),
                    v.key(r[1]),
                    v.integer(f, "size", 1, 2**62),
                    v.integer(f, "checksum", 0, U64),
                    v.integer(f, "gen", 0, U64),
                )
            )
        removed = _removed(p) if "removed" in p else []
        return cls(v.text(p, "client_id"), records, v.flag(p, "last", True), removed=removed)


@dataclass
class DiskDegraded(Request):
    """A node's disk fails writes (I/O errors, a full file system, read-only): the master demotes nothing
    to it until the node says writes work again (`reason` "")."""

    METHOD: ClassVar[str] = "disk_degraded"
    client_id: str
    reason: str
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> DiskDegraded:
        reason = v.field(p, "reason")
        if not isinstance(reason, str) or len(reason.encode()) > 1024:
            raise InvalidArgumentError("'reason' must be a string of at most 1024 bytes")
        return cls(v.text(p, "client_id"), reason)


@dataclass
class UnmountSegment(Request):
    METHOD: ClassVar[str] = "unmount_segment"
    client_id: str
    segment_id: int
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> UnmountSegment:
        return cls(v.text(p, "client_id"), v.integer(p, "segment_id", 1, U64))


class PutItem(NamedTuple):
    key: str
    size: int
    checksum: int  # xxh3-64 of the value


@dataclass
class PutStart(Request):
    """Allocates replicas for new objects. Per item: placements to write, or None when the same bytes
    are already stored."""

    METHOD: ClassVar[str] = "put_start"
    client_id: str
    items: list[PutItem]
    replicas: int
    pin: bool = False
    min_replicas: int = 0  # accept down to this many when fewer distinct segments are usable (0: all)
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> PutStart:
        # (tuple.__new__ in a C loop: PutItem(*item), a Python call per item, was a tenth of a put's start)
        items = list(map(tuple.__new__, itertools.repeat(PutItem), v.put_items(p)))
        min_replicas = v.integer(p, "min_replicas", 0, 64) if "min_replicas" in p else 0
        return cls(
            v.text(p, "client_id"), items, v.integer(p, "replicas", 1, 64), v.flag(p, "pin"), min_replicas
        )

    @staticmethod
    def decode_reply(obj: Any) -> list[ItemResult]:
        return placed_items(obj)


@dataclass
class PutEnd(Request):
    METHOD: ClassVar[str] = "put_end"
    client_id: str
    keys: list[str]
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> PutEnd:
        return cls(v.text(p, "client_id"), v.keys(p))

    @staticmethod
    def decode_reply(obj: Any) -> list[ItemResult]:
        return _items(obj)


@dataclass
class PutRevoke(PutEnd):
    """Frees a put in progress (its bytes did not reach every replica). Same fields as PutEnd."""

    METHOD: ClassVar[str] = "put_revoke"


@dataclass
class GetReplicas(Request):
    """Per key: its location with a fresh read lease, or None for a miss. With `prefix`, keys after the
    first miss are not looked up (no lease, no access counted): a block is worthless without its prefix."""

    METHOD: ClassVar[str] = "get_replicas"
    keys: list[str]
    prefix: bool = False
    host_id: str = ""  # the reader's host: a disk-only object on a disk there may be read directly

    @classmethod
    def parse(cls, p: dict[str, Any]) -> GetReplicas:
        host_id = v.text(p, "host_id") if p.get("host_id", "") != "" else ""
        return cls(v.keys(p), v.flag(p, "prefix"), host_id)

    @staticmethod
    def decode_reply(obj: Any) -> list[ObjectLocation | None]:
        if not isinstance(obj, list):
            raise ProtocolError("master sent a malformed get_replicas reply")
        out: list[ObjectLocation | None] = []
        for entry in obj:
            if entry is None:
                out.append(None)
                continue
            out.append(_object_location(entry))
        return out


@dataclass
class Exists(Request):
    METHOD: ClassVar[str] = "exists"
    keys: list[str]

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Exists:
        return cls(v.keys(p))

    @staticmethod
    def decode_reply(obj: Any) -> list[bool]:
        if not isinstance(obj, list):
            raise ProtocolError("master sent a malformed exists reply")
        return [bool(x) for x in obj]


@dataclass
class MatchPrefix(Request):
    METHOD: ClassVar[str] = "match_prefix"
    keys: list[str]

    @classmethod
    def parse(cls, p: dict[str, Any]) -> MatchPrefix:
        return cls(v.keys(p))

    @staticmethod
    def decode_reply(obj: Any) -> PrefixMatch:
        matched, replicas, per_node = _record(PrefixMatch, obj)
        return PrefixMatch(int(matched), [list(r) for r in replicas], dict(per_node))


@dataclass
class Remove(Request):
    """Removes objects (per key). `force` also removes objects leased to readers: of objects another
    client wrote, only an admin's (AdminProve) may. `client_id`: who removes ("": an unregistered caller,
    who may not force)."""

    METHOD: ClassVar[str] = "remove"
    keys: list[str]
    force: bool = False
    client_id: str = ""
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Remove:
        client_id = v.text(p, "client_id") if p.get("client_id") else ""
        return cls(v.keys(p), v.flag(p, "force"), client_id)

    @staticmethod
    def decode_reply(obj: Any) -> list[ItemResult]:
        return _items(obj)


@dataclass
class RemoveAll(Request):
    """Removes every object: a registered admin's only (AdminProve)."""

    METHOD: ClassVar[str] = "remove_all"
    force: bool = False
    client_id: str = ""
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> RemoveAll:
        client_id = v.text(p, "client_id") if p.get("client_id") else ""
        return cls(v.flag(p, "force"), client_id)

    @staticmethod
    def decode_reply(obj: Any) -> int:
        return int(obj)


@dataclass
class NodeChallenge(Request):
    """Asks the master for a fresh nonce to sign a node identity's registration over (RegisterClient
    .node_nonce); replies it. Good for one registration of the identity, for a short while, at this
    master only (kvstore.master.node_nonces)."""

    METHOD: ClassVar[str] = "node_challenge"

    @classmethod
    def parse(cls, p: dict[str, Any]) -> NodeChallenge:
        return cls()

    @staticmethod
    def decode_reply(obj: Any) -> str:
        return _nonce(obj, "node")


@dataclass
class AdminChallenge(Request):
    """Asks the master for a fresh nonce to prove admin rights over (AdminProve); replies it (hex). One
    per client at a time: a new one replaces the last."""

    METHOD: ClassVar[str] = "admin_challenge"
    client_id: str
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> AdminChallenge:
        return cls(v.text(p, "client_id"))

    @staticmethod
    def decode_reply(obj: Any) -> str:
        return _nonce(obj, "admin")


@dataclass
class AdminProve(Request):
    """`proof`: kvstore.rpc.admin.proof(admin secret, client id, nonce) over the nonce AdminChallenge
    gave; the master then holds this registration an admin (until it ends). The nonce is spent either
    way."""

    METHOD: ClassVar[str] = "admin_prove"
    client_id: str
    proof: str
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> AdminProve:
        return cls(v.text(p, "client_id"), v.token(p, "proof"))


@dataclass
class Stats(Request):
    METHOD: ClassVar[str] = "stats"

    @classmethod
    def parse(cls, p: dict[str, Any]) -> Stats:
        return cls()

    @staticmethod
    def decode_reply(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise ProtocolError("master sent malformed stats")
        return obj


@dataclass
class ClusterStatus(Stats):
    """`kvstore status`: the master's role, the nodes and their segments per tier, the counters and
    recent rates (kvstore.master.status)."""

    METHOD: ClassVar[str] = "cluster_status"

    @staticmethod
    def decode_reply(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list):
            raise ProtocolError("master sent a malformed status")
        return obj


@dataclass
class ChangeReplica(Request):
    METHOD: ClassVar[str] = "change_replica"
    key: str
    replicas: int

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ChangeReplica:
        return cls(v.key(v.field(p, "key")), v.integer(p, "replicas", 0, 64))


class CorruptReplica(NamedTuple):
    """A replica whose bytes failed the reader's checksum. `checksum` is what the reader expected: the
    master drops the replica only if that is still the object's (a reader with a stale location must not
    drop a newer object's good replica)."""

    key: str
    engine: str
    region_id: int
    offset: int
    checksum: int


@dataclass
class ReportReplicas(Request):
    """What a client found while moving bytes: nodes it could not reach, replicas that failed their
    checksum. The master stops offering (and placing on) the first and drops the second."""

    METHOD: ClassVar[str] = "report_replicas"
    client_id: str
    unreachable: list[str]
    corrupt: list[CorruptReplica]
    token: str = ""  # the client's registration token (OWN_NAME)

    @classmethod
    def parse(cls, p: dict[str, Any]) -> ReportReplicas:
        unreachable = v.field(p, "unreachable")
        corrupt = v.field(p, "corrupt")
        if not isinstance(unreachable, list) or not isinstance(corrupt, list):
            raise InvalidArgumentError("'unreachable' and 'corrupt' must be lists")
        if len(unreachable) > v.MAX_REPORT or len(corrupt) > v.MAX_REPORT:
            raise InvalidArgumentError(f"at most {v.MAX_REPORT} reports per call")
        engines = [v.text({"engine": e}, "engine") for e in unreachable]
        bad: list[CorruptReplica] = []
        for c in corrupt:
            if not (isinstance(c, list) and len(c) == 5):
                raise InvalidArgumentError(
                    "each corrupt replica is [key, engine, region_id, offset, checksum]"
                )
            fields_ = {"engine": c[1], "region_id": c[2], "offset": c[3], "checksum": c[4]}
            bad.append(
                CorruptReplica(
                    v.key(c[0]),
                    v.text(fields_, "engine"),
                    v.integer(fields_, "region_id", 1, U64),
                    v.integer(fields_, "offset", 0, U64),
                    v.integer(fields_, "checksum", 0, U64),
                )
            )
        return cls(v.text(p, "client_id"), engines, bad)


REQUESTS: dict[str, type[Request]] = {
    cls.METHOD: cls
    for cls in (
        Hello,
        RegisterClient,
        Heartbeat,
        CloseClient,
        MountSegment,
        RestoreSegment,
        UnmountSegment,
        AwaitWork,
        MountDisk,
        RestoreDisk,
        DiskDegraded,
        PutStart,
        PutEnd,
        PutRevoke,
        GetReplicas,
        Exists,
        MatchPrefix,
        Remove,
        RemoveAll,
        NodeChallenge,
        AdminChallenge,
        AdminProve,
        Stats,
        ClusterStatus,
        ChangeReplica,
        ReportReplicas,
    )
}


for _cls in REQUESTS.values():
    _cls.FIELDS = frozenset(f.name for f in fields(_cls))  # type: ignore[arg-type]


def _nonce(obj: Any, what: str) -> str:
    """A challenge's reply: the master's nonce, hex."""
    if not isinstance(obj, str) or not 32 <= len(obj) <= 128:
        raise ProtocolError(f"master sent a malformed {what} nonce")
    return obj


def parse_request(method: str, params: dict[str, Any]) -> Request:
    """The typed request for a method name and its wire parameters; InvalidArgumentError when the
    parameters do not fit. An unknown method raises KeyError, for the caller to report."""
    cls = REQUESTS.get(method)
    if cls is None:
        raise KeyError(method)
    if not cls.FIELDS.issuperset(params):  # no set is built on the common path
        unknown = sorted(params.keys() - cls.FIELDS)
        raise InvalidArgumentError(f"{method}: unknown parameter(s) {', '.join(unknown)}")
    request = cls.parse(params)
    if cls in OWN_NAME:
        request.token = v.token(params, "token") if params.get("token") else ""  # type: ignore[attr-defined]
    return request


# Requests a client makes in its own name: each carries the token it registered with (RegisterClient
# .token), stamped by its MasterClient, and the master refuses one whose token is not the registered
# client's (kvstore.master.handlers): no process acts in another's name (reports, acknowledgements of
# kills and holds, puts, mounts, closing its session).
OWN_NAME: frozenset[type[Request]] = frozenset(
    c for c in REQUESTS.values() if "token" in c.FIELDS and c is not RegisterClient
)
