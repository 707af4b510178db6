"""Checks on RPC parameters: every field a peer sends is typed and bounded before it is used."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from kvstore._meta import plain_keys
from kvstore.errors import InvalidArgumentError

MAX_KEY_BYTES = 4096
# Per-request bounds keep one legal request from holding the master's loop (every other client waits):
# ~10 ms of work at most on the reference machine. Clients split larger batches (kvstore.client.store).
MAX_KEYS = 16384
"""Keys per lookup, existence check, removal, end or revoke."""
MAX_PUT_ITEMS = 4096
"""Items per put_start (each allocates replicas, and may evict)."""
MAX_NAME = 512
_HEX = re.compile("[0-9a-f]+")
MAX_REPORT = 4096


def field(params: dict[str, Any], name: str) -> Any:
    if name not in params:
        raise InvalidArgumentError(f"missing parameter {name!r}")
    return params[name]


def bounded_list(params: dict[str, Any], name: str, what: str, most: int = MAX_KEYS) -> list[Any]:
    """A list parameter of at most `most` entries (`what` names them in the error)."""
    value = field(params, name)
    if not isinstance(value, list) or len(value) > most:
        raise InvalidArgumentError(f"{name!r} must be a list of at most {most} {what}".rstrip())
    return value


def ids(params: dict[str, Any], name: str, what: str, most: int) -> list[int]:
    """A list of at most `most` ids, each an integer in [1, 2**64): checked in one pass (a node
    acknowledges thousands of kills in one request)."""
    value = bounded_list(params, name, what, most)
    if not all(type(i) is int and 0 < i < 2**64 for i in value):
        raise InvalidArgumentError(f"{name!r} must hold {what}: integers in [1, 2**64)")
    return value


def text(params: dict[str, Any], name: str, max_len: int = MAX_NAME) -> str:
    value = field(params, name)
    if not isinstance(value, str) or not value or len(value.encode()) > max_len:
        raise InvalidArgumentError(f"{name!r} must be a non-empty string of at most {max_len} bytes")
    return value


def token(params: dict[str, Any], name: str) -> str:
    """A client's registration token: 32 to 128 hex digits (kvstore.rpc.messages.new_token)."""
    value = field(params, name)
    if not isinstance(value, str) or not 32 <= len(value) <= 128 or not _HEX.fullmatch(value):
        raise InvalidArgumentError(f"{name!r} must be 32 to 128 hex digits")
    return value


def integer(params: dict[str, Any], name: str, low: int, high: int) -> int:
    value = field(params, name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgumentError(f"{name!r} must be an integer in [{low}, {high}]")
    return value


def flag(params: dict[str, Any], name: str, default: bool = False) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name!r} must be a boolean")
    return value


KEY_RULE = f"keys must be non-empty strings of at most {MAX_KEY_BYTES} bytes (UTF-8)"


def key_ok(value: Any) -> bool:
    """The key rule, as a test (clients use it to fail one bad key of a batch alone). A key must encode
    as UTF-8: a lone surrogate cannot travel (msgpack refuses it), so it fails here, alone."""
    if type(value) is not str or not value:
        return False
    if value.isascii():
        return len(value) <= MAX_KEY_BYTES
    try:
        return len(value.encode()) <= MAX_KEY_BYTES
    except UnicodeEncodeError:
        return False


def _plain_keys(values: list[Any]) -> bool:
    """True when every value is a non-empty ASCII str of at most MAX_KEY_BYTES: the common case, checked
    in one C++ pass over the batch (a Python test per key cost the master half of an exists request; C
    loops of map, set and join a third of a get's parse)."""
    return plain_keys(values, MAX_KEY_BYTES)


def all_keys_ok(values: list[Any]) -> bool:
    """key_ok for every value, fast for the common case (short ASCII strings)."""
    return _plain_keys(values) or all(key_ok(k) for k in values)


def key(value: Any) -> str:
    if not key_ok(value):
        raise InvalidArgumentError(KEY_RULE)
    return value


def keys(params: dict[str, Any], name: str = "keys") -> list[str]:
    value = field(params, name)
    if not isinstance(value, list) or len(value) > MAX_KEYS:
        raise InvalidArgumentError(f"{name!r} must be a list of at most {MAX_KEYS} keys")
    if _plain_keys(value):  # the common case: short non-empty ASCII strings
        return value
    return [key(k) for k in value]


def plain_columns(value: list[Any], bounds: tuple[tuple[int, int] | str, ...]) -> list[list[Any]] | None:
    """The records' fields as columns (one list per field) when every record is a list of len(bounds)
    fields, each in its bound: (low, high) for an int (not a bool), "key" for a plain key (_plain_keys),
    "flag" for a bool. Checked in C loops over the batch; None when any record is not (the caller then
    checks one by one, and names the error)."""
    if not value:
        return [[] for _ in bounds]
    if set(map(type, value)) != {list} or set(map(len, value)) != {len(bounds)}:
        return None
    columns = list(map(list, zip(*value, strict=True)))
    for column, bound in zip(columns, bounds, strict=True):
        if bound == "key":
            if not _plain_keys(column):
                return None
        elif bound == "flag":
            if set(map(type, column)) != {bool}:
                return None
        elif set(map(type, column)) != {int} or min(column) < bound[0] or max(column) > bound[1]:
            return None
    return columns


def plain_records(
    value: list[Any], bounds: tuple[tuple[int, int] | str, ...]
) -> list[tuple[Any, ...]] | None:
    """plain_columns' records, each a tuple of its fields (None where plain_columns is)."""
    columns = plain_columns(value, bounds)
    return None if columns is None else list(zip(*columns, strict=True))


RecordBounds = Mapping[str, tuple[int, int] | str]
"""A record's field bounds by name, in its fields' order, each in plain_records' terms
(kvstore.rpc.data_requests.PUT_ITEM_BOUNDS: from its declaration by kvstore.rpc.schema.plain_bounds)."""


def put_items(params: dict[str, Any], bounds: RecordBounds) -> list[tuple[str, int, int]]:
    """[[key, size, checksum], ...], each field within its bound in `bounds` (those of the declaration,
    kvstore.rpc.data_requests.PUT_ITEM_BOUNDS); an error names the field and its bound."""
    return list(zip(*put_columns(params, bounds), strict=True))


def put_columns(params: dict[str, Any], bounds: RecordBounds) -> tuple[list[str], list[int], list[int]]:
    """put_items' fields as columns: (keys, sizes, checksums), checked as put_items checks them (the master
    reads a batch's columns: no tuple per item)."""
    value = field(params, "items")
    if not isinstance(value, list) or len(value) > MAX_PUT_ITEMS:
        raise InvalidArgumentError(f"'items' must be a list of at most {MAX_PUT_ITEMS} entries")
    plain = plain_columns(value, tuple(bounds.values()))
    if plain is not None:
        keys, sizes, checksums = plain
        return keys, sizes, checksums
    size_bound, checksum_bound = bounds["size"], bounds["checksum"]
    keys, sizes, checksums = [], [], []
    for item in value:
        if not (isinstance(item, list) and len(item) == len(bounds)):
            raise InvalidArgumentError(f"each put item must be [{', '.join(bounds)}]")
        k, size, checksum = item
        sizes.append(_within("size", size, size_bound))
        checksums.append(_within("checksum", checksum, checksum_bound))
        keys.append(key(k))
    return keys, sizes, checksums


def _within(name: str, value: Any, bound: tuple[int, int] | str) -> int:
    """`value` when an integer (not a bool) within `bound`, (low, high); else an error naming both."""
    low, high = cast(tuple[int, int], bound)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgumentError(f"{name} must be an integer in [{low}, {high}]")
    return value
