"""Every master RPC as a declared record: one request dataclass per method, whose field types carry
their wire rules (kvstore.rpc.schema), so its parser, its parameter names, its row in REQUESTS and its
handler in the master (the method named by METHOD) all come from that one declaration. The requests
live by role (session_requests, node_requests, data_requests); replies are the named tuples of
kvstore.rpc.records, decoded by the request's ``decode_reply``. Callers name them all messages.X.

A client opens with ``Hello``: a master speaking another PROTOCOL_VERSION refuses it with a clear error.
"""

from __future__ import annotations

from typing import Any

from kvstore.errors import InvalidArgumentError
from kvstore.rpc.data_requests import (
    ChangeReplica,
    CorruptReplica,
    Exists,
    GetReplicas,
    MatchPrefix,
    PutEnd,
    PutItem,
    PutRevoke,
    PutStart,
    Remove,
    RemoveAll,
    ReportReplicas,
)
from kvstore.rpc.node_requests import (
    FENCE_BATCH,
    HOLD_FIELDS,
    RESTORE_FIELDS,
    RESULTS_BATCH,
    AwaitWork,
    DiskDegraded,
    DiskRecord,
    MountDisk,
    MountSegment,
    Removal,
    RestoreDisk,
    RestoreRecord,
    RestoreSegment,
    UnmountSegment,
)
from kvstore.rpc.records import (
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
)
from kvstore.rpc.schema import REQUESTS, U64, Request, plain_bounds
from kvstore.rpc.session_requests import (
    MAX_NICS,
    PROTOCOL_VERSION,
    AdminChallenge,
    AdminProve,
    CloseClient,
    ClusterStatus,
    Heartbeat,
    Hello,
    NicPaths,
    NodeChallenge,
    RegisterClient,
    Stats,
    client_id_for,
    hello_reply,
    new_token,
    node_key_fingerprint,
    node_public_fingerprint,
)

__all__ = [
    "DISK",
    "FENCE_BATCH",
    "HOLD_FIELDS",
    "MAX_NICS",
    "MEMORY",
    "OWN_NAME",
    "PROTOCOL_VERSION",
    "REQUESTS",
    "RESTORE_BOUNDS",
    "RESTORE_FIELDS",
    "RESULTS_BATCH",
    "U64",
    "AdminChallenge",
    "AdminProve",
    "AwaitWork",
    "ChangeReplica",
    "ChecksumCheck",
    "CloseClient",
    "ClusterStatus",
    "CopyTask",
    "CorruptReplica",
    "DiskDegraded",
    "DiskDrop",
    "DiskOrder",
    "DiskRecord",
    "DiskResult",
    "Exists",
    "FenceOrder",
    "GetReplicas",
    "Heartbeat",
    "HeartbeatReply",
    "HeldReplica",
    "Hello",
    "HelloReply",
    "ItemResult",
    "Location",
    "MatchPrefix",
    "MountDisk",
    "MountSegment",
    "NicPaths",
    "NodeChallenge",
    "NodeWork",
    "ObjectLocation",
    "Placement",
    "PrefixMatch",
    "PutEnd",
    "PutItem",
    "PutRevoke",
    "PutStart",
    "RegisterClient",
    "RegisterReply",
    "Removal",
    "Remove",
    "RemoveAll",
    "ReportReplicas",
    "Request",
    "RestoreDisk",
    "RestoreRecord",
    "RestoreSegment",
    "Stats",
    "UnmountSegment",
    "client_id_for",
    "hello_reply",
    "new_token",
    "node_key_fingerprint",
    "node_public_fingerprint",
    "parse_request",
]

RESTORE_BOUNDS = plain_bounds(RestoreRecord)
"""Per RestoreSegment record field: (low, high) of an integer, "key", or "flag" (from its declaration)."""


def parse_request(method: str, params: dict[str, Any]) -> Request:
    """The typed request for a method name and its wire parameters; InvalidArgumentError when the
    parameters do not fit. An unknown method raises KeyError, for the caller to report."""
    cls = REQUESTS.get(method)
    if cls is None:
        raise KeyError(method)
    if not cls.FIELDS.issuperset(params):  # no set is built on the common path
        unknown = sorted(params.keys() - cls.FIELDS)
        raise InvalidArgumentError(f"{method}: unknown parameter(s) {', '.join(unknown)}")
    return cls._parse(params)


# Requests a client makes in its own name: each carries the token it registered with (RegisterClient
# .token), stamped by its MasterClient, and the master refuses one whose token is not the registered
# client's (kvstore.master.handlers): no process acts in another's name (reports, acknowledgements of
# kills and holds, puts, mounts, closing its session).
OWN_NAME: frozenset[type[Request]] = frozenset(
    c for c in REQUESTS.values() if "token" in c.FIELDS and c is not RegisterClient
)
