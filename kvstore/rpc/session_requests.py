"""The requests of a session with the master: its opening (Hello), registrations and their proofs, the
heartbeat, admin rights, and the cluster's stats and status (declared once: kvstore.rpc.schema)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NamedTuple

from kvstore.errors import InvalidArgumentError, PermissionDeniedError, ProtocolError
from kvstore.rpc import node_proof
from kvstore.rpc import validate as v
from kvstore.rpc.etcd import MAX_SHARDS
from kvstore.rpc.records import HeartbeatReply, HelloReply, RegisterReply, _record
from kvstore.rpc.schema import Int, Keys, Name, Omitted, OwnToken, Read, Request, Text, Token, With, request

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
# 12: a node's hold and its RestoreSegment record carry a user's replica target as their own trailing
# field (HeldReplica.target, RestoreRecord.target): a node and a master of 11 misread each other's holds
PROTOCOL_VERSION = 12


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


@request
@dataclass
class Hello(Request):
    METHOD: ClassVar[str] = "hello"
    version: Annotated[int, Int(0, 2**31)] = PROTOCOL_VERSION

    @staticmethod
    def decode_reply(obj: Any) -> HelloReply:
        if isinstance(obj, (list, tuple)) and len(obj) == 2:  # a one-shard master: 0 of 1
            return HelloReply(*obj)
        reply: HelloReply = _record(HelloReply, obj)
        shard, shards = reply.shard, reply.shards
        if not (type(shard) is int and type(shards) is int and 0 <= shard < shards <= MAX_SHARDS):
            raise ProtocolError("master sent a malformed HelloReply")
        return reply


def hello_reply(epoch: int, shard: int, shards: int) -> tuple[int, ...]:
    """Hello's reply on the wire: a sharded master adds which shard it serves of how many; a one-shard
    master's reply is the two fields it always was (clients of any release read it)."""
    if shards == 1:
        return (PROTOCOL_VERSION, epoch)
    return tuple(HelloReply(PROTOCOL_VERSION, epoch, shard, shards))


NodeProofPart = Annotated[str, Text(node_proof.MAX_PUBLIC_CHARS), Omitted.FALSY, With("node_id")]


@request
@dataclass
class RegisterClient(Request):
    METHOD: ClassVar[str] = "register_client"
    client_id: Name
    host_id: Name
    # A storage node's identity, "<host>/<name>#<node_key_fingerprint(node_key)>": it supersedes an
    # older registration with the same one (that node restarted)
    node_id: Annotated[str, Text(), Omitted.FALSY] = ""
    # The process's secret for its registration (new_token()): every request in its name carries it
    # (OWN_NAME), and registering its id again takes the same one. Chosen by the client: it never crosses
    # back.
    token: Annotated[str, Token()] = ""
    # With node_id: the public half of the node key's pair (its fingerprint ends node_id), the nonce
    # NodeChallenge gave, and the signature over them (kvstore.rpc.node_proof); the key never crosses.
    node_public: NodeProofPart = ""
    node_nonce: NodeProofPart = ""
    node_proof: NodeProofPart = ""

    def check(self) -> None:
        if self.client_id != client_id_for(self.token):
            raise PermissionDeniedError(
                f"client id {self.client_id!r} is not its token's (kvstore.rpc.messages.client_id_for)"
            )
        node_id, public = self.node_id, self.node_public
        if node_id and (
            node_id.rpartition("#")[2] != node_public_fingerprint(public)
            or not node_proof.verify(public, self._signed(), self.node_proof)
        ):
            raise PermissionDeniedError(
                f"node identity {node_id!r} is not proved: its registration must be signed with its key"
            )

    def _signed(self) -> bytes:
        return node_proof.message(self.node_nonce, self.client_id, self.node_id)

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


def _nic_paths(p: dict[str, Any], name: str) -> list[NicPaths]:
    rows = v.bounded_list(p, name, "NICs", MAX_NICS)
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


@request
@dataclass
class Heartbeat(Request):
    METHOD: ClassVar[str] = "heartbeat"
    client_id: Name
    # keys this client read from leased locations since the last one
    touched: Annotated[list[str] | None, Keys(), Omitted.NONE] = None
    paths: Annotated[list[NicPaths] | None, Read(_nic_paths), Omitted.NONE] = None  # its engine's NIC paths
    token: OwnToken = ""

    @staticmethod
    def decode_reply(obj: Any) -> HeartbeatReply:
        (known,) = _record(HeartbeatReply, obj)
        return HeartbeatReply(bool(known))


@request
@dataclass
class CloseClient(Request):
    METHOD: ClassVar[str] = "close_client"
    client_id: Name
    token: OwnToken = ""


def _nonce(obj: Any, what: str) -> str:
    """A challenge's reply: the master's nonce, hex."""
    if not isinstance(obj, str) or not 32 <= len(obj) <= 128:
        raise ProtocolError(f"master sent a malformed {what} nonce")
    return obj


@request
@dataclass
class NodeChallenge(Request):
    """Asks the master for a fresh nonce to sign a node identity's registration over (RegisterClient
    .node_nonce); replies it. Good for one registration of the identity, for a short while, at this
    master only (kvstore.master.node_nonces)."""

    METHOD: ClassVar[str] = "node_challenge"

    @staticmethod
    def decode_reply(obj: Any) -> str:
        return _nonce(obj, "node")


@request
@dataclass
class AdminChallenge(Request):
    """Asks the master for a fresh nonce to prove admin rights over (AdminProve); replies it (hex). One
    per client at a time: a new one replaces the last."""

    METHOD: ClassVar[str] = "admin_challenge"
    client_id: Name
    token: OwnToken = ""

    @staticmethod
    def decode_reply(obj: Any) -> str:
        return _nonce(obj, "admin")


@request
@dataclass
class AdminProve(Request):
    """`proof`: kvstore.rpc.admin.proof(admin secret, client id, nonce) over the nonce AdminChallenge
    gave; the master then holds this registration an admin (until it ends). The nonce is spent either
    way."""

    METHOD: ClassVar[str] = "admin_prove"
    client_id: Name
    proof: Annotated[str, Token()]
    token: OwnToken = ""


@request
@dataclass
class Stats(Request):
    METHOD: ClassVar[str] = "stats"

    @staticmethod
    def decode_reply(obj: Any) -> dict[str, Any]:
        if not isinstance(obj, dict):
            raise ProtocolError("master sent malformed stats")
        return obj


@request
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
