"""The records masters write in etcd (kvstore.rpc.etcd: the leader key, one candidate key each), signed
with the cluster secret: someone who may write etcd but lacks the secret cannot name a leader, since
clients and standbys ignore a record that does not verify.

A record names the master's RPC address, its run id (one candidacy of one process), the etcd lease its
key lives under and the leader TTL it keeps. The MAC (HMAC-SHA256, under a key derived from the secret)
covers those, the cluster's name and the record's kind (leader or candidate); a record verifies only in a
key that lives under the lease it names. So a candidate's record copied to the leader key, another
cluster's, a leader's record moved off its lease, or one of a lease that has ended is ignored.

Without a secret nothing is signed: a well-formed record in a key under the lease it names is taken, so
whoever may write etcd can name a leader (protect etcd then: TLS and credentials, kvstore.config.etcd).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from kvstore.errors import InvalidArgumentError
from kvstore.rpc.etcd import MAX_SHARDS
from kvstore.rpc.framing import parse_address

LEADER = "leader"
CANDIDATE = "candidate"
MAX_RECORD_BYTES = 1024  # a record is ~200 bytes; a bigger value is not one of ours
_KEY_LABEL = b"kvstore etcd records v1"


@dataclass(frozen=True)
class MasterRecord:
    """A master as its record in etcd names it."""

    address: str  # its RPC address
    run_id: str  # this candidacy of this process
    lease: int  # the etcd lease its key lives under
    ttl: int  # its leader TTL (seconds)


class Records:
    """Writes and checks one cluster's records; signed when the cluster has a secret."""

    def __init__(self, secret: bytes, cluster: str) -> None:
        self.cluster = cluster
        self._key = hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest() if secret else b""

    @property
    def signed(self) -> bool:
        return bool(self._key)

    def encode(self, kind: str, record: MasterRecord) -> bytes:
        body: dict[str, Any] = {
            "address": record.address,
            "id": record.run_id,
            "lease": record.lease,
            "ttl": record.ttl,
        }
        if self._key:
            body["mac"] = self._mac(kind, record).hex()
        return json.dumps(body, separators=(",", ":")).encode()

    def decode(self, kind: str, value: bytes | None, lease_id: int) -> MasterRecord | None:
        """The record in a key whose value is `value` and whose lease is `lease_id`; None unless it is
        well formed, names that lease and (with a secret) carries this cluster's MAC for `kind`."""
        body = _body(value)
        if body is None:
            return None
        record = _parse(body)
        if record is None or record.lease != lease_id:
            return None
        if self._key and not _signed(body, self._mac(kind, record)):
            return None
        return record

    def encode_shards(self, shards: int) -> bytes:
        """The shard map's value: how many shards the cluster is split over, signed like a record (the
        MAC covers the cluster's name and the count), so that who may write etcd but lacks the secret
        cannot make clients route keys to other masters."""
        body: dict[str, Any] = {"shards": shards}
        if self._key:
            body["mac"] = self._shards_mac(shards).hex()
        return json.dumps(body, separators=(",", ":")).encode()

    def decode_shards(self, value: bytes | None) -> int | None:
        """The count a shard map's value names; None unless well formed (1..MAX_SHARDS) and (with a
        secret) signed with this cluster's."""
        body = _body(value)
        shards = body.get("shards") if isinstance(body, dict) else None
        if type(shards) is not int or not 1 <= shards <= MAX_SHARDS:
            return None
        if self._key and not _signed(body, self._shards_mac(shards)):
            return None
        return shards

    def _shards_mac(self, shards: int) -> bytes:
        return hmac.new(
            self._key, json.dumps(["shards", self.cluster, shards]).encode(), hashlib.sha256
        ).digest()

    def _mac(self, kind: str, record: MasterRecord) -> bytes:
        fields = [kind, self.cluster, record.address, record.run_id, record.lease, record.ttl]
        return hmac.new(self._key, json.dumps(fields).encode(), hashlib.sha256).digest()


def _parse(body: Any) -> MasterRecord | None:
    if not isinstance(body, dict):
        return None
    address, run_id, lease, ttl = (body.get(k) for k in ("address", "id", "lease", "ttl"))
    if not isinstance(address, str) or not isinstance(run_id, str) or not 0 < len(run_id) <= 64:
        return None
    if type(lease) is not int or type(ttl) is not int or not 0 < lease < 2**63 or not 0 < ttl <= 3600:
        return None
    try:
        parse_address(address)
    except InvalidArgumentError:
        return None
    return MasterRecord(address, run_id, lease, ttl)


def _body(value: bytes | None) -> Any:
    """A record's JSON body; None when empty, too long or not JSON."""
    if not value or len(value) > MAX_RECORD_BYTES:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _signed(body: Any, mac: bytes) -> bool:
    """Whether a record's body carries `mac` (hex, compared in constant time)."""
    given = body.get("mac") if isinstance(body, dict) else None
    try:
        return hmac.compare_digest(bytes.fromhex(given) if isinstance(given, str) else b"", mac)
    except ValueError:
        return False
