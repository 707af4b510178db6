"""Batch replies decoded in C loops (the shape every item shares) must equal the record-by-record
decoding, and a malformed reply must be refused either way."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvstore.errors import ProtocolError
from kvstore.rpc import messages as m
from kvstore.rpc.records import _items, _record

ints = st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4)
placement = ints.map(lambda values: ["127.0.0.1:1", *values])
item = st.one_of(
    st.lists(placement, max_size=3).map(lambda placed: [0, "", placed]),
    st.just([0, "", None]),  # already stored with the same bytes
    st.tuples(st.integers(1, 40), st.text(max_size=8)).map(lambda e: [e[0], e[1], None]),
)


def by_record(reply: list[Any]) -> list[m.ItemResult]:
    return _items(reply, lambda placed: [_record(m.Placement, r) for r in placed])


@given(st.lists(item, max_size=40))
def test_a_put_start_reply_decodes_as_record_by_record(reply: list[Any]) -> None:
    decoded = m.PutStart.decode_reply(reply)
    assert decoded == by_record(reply)
    assert all(type(x) is m.ItemResult for x in decoded)
    for x in decoded:
        assert x.value is None or all(type(p) is m.Placement for p in x.value)


@given(st.lists(item.map(lambda i: [i[0], i[1], None]), max_size=40))
def test_a_put_end_reply_decodes_as_record_by_record(reply: list[Any]) -> None:
    decoded = m.PutEnd.decode_reply(reply)
    assert decoded == by_record(reply) and all(type(x) is m.ItemResult for x in decoded)


GOOD = [0, "", [["127.0.0.1:1", 1, 0, 2, 3]]]


@pytest.mark.parametrize(
    "reply",
    [
        None,
        {"a": 1},
        [GOOD, [0, ""]],  # an item of two fields
        [GOOD, [0, "", None, 1]],
        [GOOD, "item"],
        [GOOD, [0, "", [["127.0.0.1:1", 1, 0, 2]]]],  # a placement of four fields
        [GOOD, [0, "", [["127.0.0.1:1", 1, 0, 2, 3, 4]]]],
        [GOOD, [0, "", ["127.0.0.1:1"]]],  # a placement that is not a list
        [GOOD, [0, "", 7]],  # placements that are not a list
    ],
)
def test_a_malformed_put_start_reply_is_refused(reply: Any) -> None:
    with pytest.raises(ProtocolError, match="malformed"):
        m.PutStart.decode_reply(reply)


@pytest.mark.parametrize("reply", [None, [[0, "", None], [0, ""]], [[0, "", None], 5]])
def test_a_malformed_put_end_reply_is_refused(reply: Any) -> None:
    with pytest.raises(ProtocolError, match="malformed"):
        m.PutEnd.decode_reply(reply)
