"""A get's reply read straight from its frame: a client decodes one on every uncached get, so the common
shape (a success; per key nil or [size, checksum, copies], each copy a Location served by an engine,
unsigned integers within their bounds) is read and made into the records in C++ in one crossing
(kvstore._meta.decode_locations_reply, csrc/meta/locations_reply), with no msgpack object per field in
between. Any other frame (an error, a disk record read from its path, one that is malformed) reads as
None, and the caller decodes it the general way (GetReplicas.decode_reply), which refuses what is
malformed: the same records either way."""

from __future__ import annotations

from kvstore._meta import decode_locations_reply
from kvstore.rpc.records import Location, ObjectLocation


def decode_locations_frame(
    msg_id: int, body: bytes | bytearray | memoryview
) -> list[ObjectLocation | None] | None:
    """The records of a get_replicas response frame's `body` for request `msg_id`, or None where the
    frame is not a success of the common shape for it."""
    found: list[ObjectLocation | None] | None = decode_locations_reply(body, msg_id, ObjectLocation, Location)
    return found
