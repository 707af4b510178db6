"""A get's reply frame of the common shape is read into the client's records in C++ in one step
(kvstore.rpc.locations_frame), and they are the records the general decoding makes (unpack the frame,
GetReplicas.decode_reply); every other frame (an error, a disk record read from its path, another
request's reply, a spoiled field, bytes that are not UTF-8, a frame cut short or with more after it) is
left to the general decoding, which refuses what is malformed: never a wrong record."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvstore.errors import ProtocolError
from kvstore.rpc import framing as rpc
from kvstore.rpc import messages as m
from kvstore.rpc.locations_frame import decode_locations_frame
from tests.unit.kvstore.rpc.test_get_replicas_decode_in_c_loops import (
    ENTRY,
    SPOILED,
    assert_records,
    engine_copy,
    entries,
    file_copy,
)

msg_ids = st.one_of(st.sampled_from([0, 1, 127, 128, 2**16, 2**32, 2**63 - 1]), st.integers(0, 2**63 - 1))


def body_of(msg_id: int, result: Any, code: int = 0, message: str = "") -> bytes:
    """The msgpack body of a response frame, as the master's framing writes it (without length or MAC)."""
    return rpc.pack([msg_id, code, message, result])[rpc.HEADER_SIZE :]


def decoded_in_general(body: bytes) -> list[m.ObjectLocation | None]:
    _, code, _, result = rpc.parse_response(rpc.unpack(body))
    assert code == 0
    return m.GetReplicas.decode_reply(result)


@given(msg_ids, st.lists(entries(engine_copy), max_size=40))
def test_a_common_reply_reads_from_its_frame_as_the_general_decoding(msg_id: int, reply: list[Any]) -> None:
    body = body_of(msg_id, reply)
    for frame in (body, bytearray(body), memoryview(body)):  # (a frame with a MAC arrives as a view)
        found = decode_locations_frame(msg_id, frame)
        assert found is not None  # (read in C++, not left to the general decoding)
        assert found == decoded_in_general(body)
        assert [x is None for x in found] == [x is None for x in reply]
        assert_records(found)


@given(msg_ids, st.lists(entries(st.one_of(engine_copy, file_copy)), max_size=20))
def test_a_reply_with_files_to_read_is_left_to_the_general_decoding(msg_id: int, reply: list[Any]) -> None:
    body = body_of(msg_id, reply)
    found = decode_locations_frame(msg_id, body)
    to_read = any(not copy[2] for entry in reply if entry is not None for copy in entry[2])
    assert (found is None) == to_read
    if found is not None:
        assert found == decoded_in_general(body)


def _packs(reply: Any) -> bool:
    try:
        msgpack.packb(reply)
    except OverflowError:  # (2**64 and -2**63 - 1: no frame carries them)
        return False
    return True


SENDABLE = [s for s in SPOILED if _packs(s[1])]


@pytest.mark.parametrize("reply", [s[1] for s in SENDABLE], ids=[s[0] for s in SENDABLE])
def test_a_spoiled_field_is_never_read_from_the_frame(reply: list[Any]) -> None:
    """(A tuple where a list belongs is no spoiling once sent: msgpack makes both an array.)"""
    body = body_of(9, reply)
    found = decode_locations_frame(9, body)
    try:
        general = decoded_in_general(body)
    except ProtocolError as exc:
        assert "malformed" in str(exc)
        assert found is None
    else:
        assert found == general


def test_only_a_success_for_the_request_asked_is_read() -> None:
    good = [ENTRY, None]
    assert decode_locations_frame(5, body_of(5, good)) == decoded_in_general(body_of(5, good))
    assert decode_locations_frame(6, body_of(5, good)) is None  # another request's reply
    assert decode_locations_frame(5, body_of(5, None, code=105, message="no room")) is None
    assert decode_locations_frame(5, body_of(5, good, message="said")) is not None  # (a success's message)
    assert decode_locations_frame(5, msgpack.packb([5, 0, "", good, 1])) is None  # five parts
    assert decode_locations_frame(5, msgpack.packb((5, 0, "", {"a": good}))) is None  # a map
    assert decode_locations_frame(5, body_of(5, [])) == []


def test_a_frame_the_general_decoding_refuses_is_not_read() -> None:
    body = body_of(3, [ENTRY])
    for spoiled in (body + b"\xc0", body[:-1], body[: len(body) // 2]):
        assert decode_locations_frame(3, spoiled) is None
        with pytest.raises(rpc.FrameError):
            rpc.unpack(spoiled)
    host = body.index(b"host-a")
    not_utf8 = body[:host] + b"\xff\xfe" + body[host + 2 :]
    assert decode_locations_frame(3, not_utf8) is None
    with pytest.raises(rpc.FrameError):
        rpc.unpack(not_utf8)


def test_strings_repeated_over_a_reply_are_read_each_time_right() -> None:
    """A reply's hosts and engines repeat (a few nodes serve a batch): each copy names its own, past the
    first 16 distinct ones too."""
    copies = [[i % 2, f"host-{i}", f"127.0.0.1:{5000 + i % 20}", i, i * 64, i, 1, ""] for i in range(60)]
    reply: list[list[Any]] = [[64, i, [copies[i], copies[(i * 7) % 60]]] for i in range(60)]
    found = decode_locations_frame(1, body_of(1, reply))
    assert found is not None and found == decoded_in_general(body_of(1, reply))
    assert [loc.engine for x in found if x for loc in x.locations] == [
        c[2] for entry in reply for c in entry[2]
    ]


def test_get_replicas_replies_are_read_from_their_frames() -> None:
    """(A client's MasterClient.receive asks the request it sent to read its reply's frame.)"""
    body = body_of(4, [ENTRY])
    assert m.GetReplicas.decode_frame(4, body) == decoded_in_general(body)
    assert m.Exists.decode_frame(4, body_of(4, [True])) is None  # (others: unpacked, then decode_reply)
