"""A record result with Packed fields (NodeWork's holds, encoded by the master's C++ hold book) is framed
with those fields as they are and the rest by msgpack: the same bytes as msgpack of the record with the
fields' values. Every other response frames exactly as msgpack-python packs it."""

from __future__ import annotations

from typing import Any, NamedTuple

import msgpack
import pytest

from kvstore.rpc import framing
from kvstore.rpc.framing import Packed


class Record(NamedTuple):
    epoch: int
    holds: Any
    rest: Any


def _body(frame: bytes) -> bytes:
    assert framing.frame_length(frame[: framing.HEADER_SIZE]) == len(frame) - framing.HEADER_SIZE
    return frame[framing.HEADER_SIZE :]


@pytest.mark.parametrize(
    "result",
    [None, 0, 1 << 40, "x", b"raw", [1, [2, "y"]], (1, "t"), Record(1, [[2, "k"]], {"a": 1}), {"k": [1]}],
)
def test_a_response_without_packed_parts_is_what_msgpack_packs(result: object) -> None:
    for response in ([7, 0, "", result], [1 << 40, 0, "", result], [7, 3, "busy", None]):
        assert _body(framing.pack(response)) == msgpack.packb(response, use_bin_type=True)


@pytest.mark.parametrize("holds", [[], [[1, 2, "k", True]], [[i, "k" * 40, 1 << 63] for i in range(20)]])
def test_a_records_packed_field_goes_as_it_is(holds: list[Any]) -> None:
    record = Record(5, Packed(msgpack.packb(holds)), [b"bin", "str"])
    body = _body(framing.pack([9, 0, "", record]))
    assert body == msgpack.packb([9, 0, "", [5, holds, [b"bin", "str"]]], use_bin_type=True)
    assert framing.parse_response(framing.unpack(body)) == (9, 0, "", [5, holds, [b"bin", "str"]])
    assert framing.value_of(record) == [5, holds, [b"bin", "str"]]


def test_a_whole_packed_result_goes_as_it_is() -> None:
    packed = Packed(msgpack.packb([[1, "a"], None]))
    assert _body(framing.pack([3, 0, "", packed])) == msgpack.packb([3, 0, "", [[1, "a"], None]])
    assert framing.value_of(packed) == [[1, "a"], None]
