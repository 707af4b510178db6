"""Master RPC framing: a 4-byte little-endian length, then a msgpack array.

Request:  [msg_id, method, params]            params: a map of argument name -> value
Response: [msg_id, code, message, result]     code 0 = ok; otherwise a kvstore error code

Both sides reject frames over MAX_FRAME and payloads that are not of this shape.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from kvstore.errors import InvalidArgumentError

MAX_FRAME = 64 << 20
_LEN = struct.Struct("<I")


class FrameError(InvalidArgumentError):
    """A frame that cannot be decoded; the connection is closed after replying."""


class Packed(bytes):
    """A value encoded as msgpack already (a batch reply the master's C++ table wrote): framed as it is,
    in place of the value, whether it is a response's whole result or a field of a record result (a
    NamedTuple: NodeWork's holds). `value()` gives the value, for in-process callers."""

    def value(self) -> Any:
        return unpack(self)


_OK = msgpack.packb(0) + msgpack.packb("")  # a response's code and message when it succeeds
_array_header = msgpack.Packer().pack_array_header


def encoded(result: Any) -> bytes:
    """The msgpack of a response's result: a Packed one as it is; a tuple (a record) with Packed fields
    field by field, those as they are; anything else by msgpack."""
    if type(result) is Packed:
        return result
    if isinstance(result, tuple) and Packed in map(type, result):
        fields = [f if type(f) is Packed else msgpack.packb(f, use_bin_type=True) for f in result]
        return _array_header(len(fields)) + b"".join(fields)
    return msgpack.packb(result, use_bin_type=True)


def value_of(result: Any) -> Any:
    """A response's result as its peer decodes it (for in-process callers of a handler)."""
    return unpack(encoded(result))


def pack(obj: Any) -> bytes:
    """A frame of `obj`; a response [msg_id, 0, "", result] whose result is Packed, or a record with
    Packed fields, carries them as they are."""
    result = obj[3] if type(obj) is list and len(obj) == 4 and obj[1] == 0 else None
    if type(result) is Packed or (isinstance(result, tuple) and Packed in map(type, result)):
        body = b"\x94" + msgpack.packb(obj[0]) + _OK + encoded(result)  # (0x94: an array of 4)
    elif type(obj) is Packed:
        body = bytes(obj)
    else:
        body = msgpack.packb(obj, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise InvalidArgumentError(f"message of {len(body)} bytes exceeds the {MAX_FRAME} byte frame limit")
    return _LEN.pack(len(body)) + body


def frame_length(header: bytes | bytearray) -> int:
    (n,) = _LEN.unpack(header)
    if n > MAX_FRAME:
        raise FrameError(f"frame of {n} bytes exceeds the {MAX_FRAME} byte limit")
    return n


def unpack(body: bytes | bytearray | memoryview) -> Any:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise FrameError(f"undecodable frame: {type(exc).__name__}") from exc


def parse_request(obj: Any) -> tuple[int, str, dict[str, Any]]:
    if not (isinstance(obj, list) and len(obj) == 3):
        raise FrameError("request must be [msg_id, method, params]")
    msg_id, method, params = obj
    if not isinstance(msg_id, int) or isinstance(msg_id, bool) or not 0 <= msg_id < 2**63:
        raise FrameError("msg_id must be a non-negative integer")
    if not isinstance(method, str) or not isinstance(params, dict):
        raise FrameError("method must be a string and params a map")
    return msg_id, method, params


def parse_response(obj: Any) -> tuple[int, int, str, Any]:
    if not (isinstance(obj, list) and len(obj) == 4 and isinstance(obj[0], int) and isinstance(obj[1], int)):
        raise FrameError("response must be [msg_id, code, message, result]")
    return obj[0], obj[1], obj[2] or "", obj[3]


HEADER_SIZE = _LEN.size


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of a master address "HOST:PORT" (IPv6 hosts in brackets)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgumentError(f"master address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)
