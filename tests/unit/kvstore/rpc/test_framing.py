"""The master's RPC frames (kvstore.rpc.framing): a result encoded by the C++ table (Packed) goes out in
the response frame as it is, and a reader decodes the same response as if msgpack-python had packed it."""

from __future__ import annotations

import msgpack
import pytest

from kvstore import rpc
from kvstore.errors import InvalidArgumentError

RESULT = [None, [4096, 2**64 - 1, [[0, "h0", "127.0.0.1:7000", 1, 2**40, 3, 2**63, ""]]]]


def _decoded(frame: bytes) -> object:
    assert rpc.frame_length(frame[: rpc.HEADER_SIZE]) == len(frame) - rpc.HEADER_SIZE
    return rpc.unpack(frame[rpc.HEADER_SIZE :])


@pytest.mark.parametrize("msg_id", [0, 127, 128, 2**32, 2**63 - 1])
def test_a_packed_result_frames_as_the_same_response(msg_id: int) -> None:
    packed = rpc.Packed(msgpack.packb(RESULT))
    frame = rpc.pack([msg_id, 0, "", packed])
    assert frame == rpc.pack([msg_id, 0, "", RESULT])  # byte for byte
    assert _decoded(frame) == [msg_id, 0, "", RESULT] and packed.value() == RESULT
    assert _decoded(rpc.pack(packed)) == RESULT


def test_a_packed_frame_is_bounded_like_any() -> None:
    with pytest.raises(InvalidArgumentError, match="frame limit"):
        rpc.pack([1, 0, "", rpc.Packed(b"\xc0" * (rpc.MAX_FRAME + 1))])
