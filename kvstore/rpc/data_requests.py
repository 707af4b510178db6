"""The requests of a client's data: puts (start, end, revoke), lookups, prefix matches, removals, replica
counts and what a reader found wrong (declared once: kvstore.rpc.schema)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, NamedTuple

from kvstore.errors import InvalidArgumentError, ProtocolError
from kvstore.rpc import validate as v
from kvstore.rpc.locations_frame import decode_locations_frame
from kvstore.rpc.put_items import PutColumns, PutItem
from kvstore.rpc.records import (
    ItemResult,
    ObjectLocation,
    PrefixMatch,
    _items,
    _record,
    object_locations,
    placed_items,
)
from kvstore.rpc.schema import (
    U64,
    Flag,
    Int,
    Key,
    Keys,
    Name,
    Omitted,
    OwnToken,
    Read,
    Request,
    Text,
    entries,
    plain_bounds,
    request,
)

KeyList = Annotated[list[str], Keys()]
Force = Annotated[bool, Flag()]
Remover = Annotated[str, Text(), Omitted.FALSY]
"""Who removes: a registered client's id, or "" (an unregistered caller)."""


PUT_ITEM_BOUNDS = dict(zip(PutItem._fields, plain_bounds(PutItem), strict=True))
"""Per PutStart item field by name: its bound in validate.put_items' terms (from PutItem's declaration)."""


def _put_items(p: dict[str, Any], name: str) -> PutColumns:
    # (columns: a PutItem made per item, and read back per item by the put path, was a fifth of its start)
    return PutColumns(*v.put_columns(p, PUT_ITEM_BOUNDS))


@request
@dataclass
class PutStart(Request):
    """Allocates replicas for new objects. Per item: placements to write, or None when the same bytes
    are already stored."""

    METHOD: ClassVar[str] = "put_start"
    client_id: Name
    items: Annotated[Sequence[PutItem], Read(_put_items)]  # (the master reads PutColumns)
    replicas: Annotated[int, Int(1, 64)]
    pin: Annotated[bool, Flag()] = False
    # accept down to this many when fewer distinct segments are usable (0: all)
    min_replicas: Annotated[int, Int(0, 64), Omitted.ABSENT] = 0
    token: OwnToken = ""

    def params(self) -> dict[str, Any]:
        p = super().params()
        if type(self.items) is PutColumns:  # (a parsed request sent on: its items as a client sends them)
            p["items"] = list(self.items)
        return p

    @staticmethod
    def decode_reply(obj: Any) -> list[ItemResult]:
        return placed_items(obj)


@request
@dataclass
class PutEnd(Request):
    METHOD: ClassVar[str] = "put_end"
    client_id: Name
    keys: KeyList
    token: OwnToken = ""

    @staticmethod
    def decode_reply(obj: Any) -> list[ItemResult]:
        return _items(obj)


@request
@dataclass
class PutRevoke(PutEnd):
    """Frees a put in progress (its bytes did not reach every replica). Same fields as PutEnd."""

    METHOD: ClassVar[str] = "put_revoke"


@request
@dataclass
class GetReplicas(Request):
    """Per key: its location with a fresh read lease, or None for a miss. With `prefix`, keys after the
    first miss are not looked up (no lease, no access counted): a block is worthless without its prefix."""

    METHOD: ClassVar[str] = "get_replicas"
    keys: KeyList
    prefix: Annotated[bool, Flag()] = False
    # the reader's host: a disk-only object on a disk there may be read directly
    host_id: Annotated[str, Text(), Omitted.EMPTY] = ""

    @staticmethod
    def decode_frame(msg_id: int, body: bytes | bytearray | memoryview) -> list[ObjectLocation | None] | None:
        return decode_locations_frame(msg_id, body)

    @staticmethod
    def decode_reply(obj: Any) -> list[ObjectLocation | None]:
        return object_locations(obj)


@request
@dataclass
class Exists(Request):
    METHOD: ClassVar[str] = "exists"
    keys: KeyList

    @staticmethod
    def decode_reply(obj: Any) -> list[bool]:
        if not isinstance(obj, list):
            raise ProtocolError("master sent a malformed exists reply")
        return [bool(x) for x in obj]


@request
@dataclass
class MatchPrefix(Request):
    METHOD: ClassVar[str] = "match_prefix"
    keys: KeyList

    @staticmethod
    def decode_reply(obj: Any) -> PrefixMatch:
        matched, replicas, per_node = _record(PrefixMatch, obj)
        return PrefixMatch(int(matched), [list(r) for r in replicas], dict(per_node))


@request
@dataclass
class Remove(Request):
    """Removes objects (per key). `force` also removes objects leased to readers: of objects another
    client wrote, only an admin's (AdminProve) may. `client_id`: who removes ("": an unregistered caller,
    who may not force)."""

    METHOD: ClassVar[str] = "remove"
    keys: KeyList
    force: Force = False
    client_id: Remover = ""
    token: OwnToken = ""

    @staticmethod
    def decode_reply(obj: Any) -> list[ItemResult]:
        return _items(obj)


@request
@dataclass
class RemoveAll(Request):
    """Removes every object: a registered admin's only (AdminProve)."""

    METHOD: ClassVar[str] = "remove_all"
    force: Force = False
    client_id: Remover = ""
    token: OwnToken = ""

    @staticmethod
    def decode_reply(obj: Any) -> int:
        return int(obj)


@request
@dataclass
class ChangeReplica(Request):
    METHOD: ClassVar[str] = "change_replica"
    key: Annotated[str, Key()]
    replicas: Annotated[int, Int(0, 64)]


class CorruptReplica(NamedTuple):
    """A replica whose bytes failed the reader's checksum. `checksum` is what the reader expected: the
    master drops the replica only if that is still the object's (a reader with a stale location must not
    drop a newer object's good replica)."""

    key: Annotated[str, Key()]
    engine: Annotated[str, Text()]
    region_id: Annotated[int, Int(1, U64)]
    offset: Annotated[int, Int(0, U64)]
    checksum: Annotated[int, Int(0, U64)]


_corrupt_entries = entries(
    CorruptReplica, "each corrupt replica is [key, engine, region_id, offset, checksum]", tuples=False
)


def _reports(p: dict[str, Any], name: str) -> list[Any]:
    """One of a report's two lists ('unreachable', 'corrupt'), bounded alike."""
    value = v.field(p, name)
    if not isinstance(value, list):
        raise InvalidArgumentError("'unreachable' and 'corrupt' must be lists")
    if len(value) > v.MAX_REPORT:
        raise InvalidArgumentError(f"at most {v.MAX_REPORT} reports per call")
    return value


def _unreachable(p: dict[str, Any], name: str) -> list[str]:
    return [v.text({"engine": e}, "engine") for e in _reports(p, name)]


def _corrupt(p: dict[str, Any], name: str) -> list[CorruptReplica]:
    return _corrupt_entries(_reports(p, name))


@request
@dataclass
class ReportReplicas(Request):
    """What a client found while moving bytes: nodes it could not reach, replicas that failed their
    checksum. The master stops offering (and placing on) the first and drops the second."""

    METHOD: ClassVar[str] = "report_replicas"
    client_id: Name
    unreachable: Annotated[list[str], Read(_unreachable)]
    corrupt: Annotated[list[CorruptReplica], Read(_corrupt)]
    token: OwnToken = ""
