"""A get's reply (GetReplicas) is decoded in C loops where every item has the common shape, into the
same records as the record-by-record decoding, and a reply a hostile master spoiled in any field is
refused with ProtocolError by both ways (never a partial or wrong record)."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvstore.errors import ProtocolError
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import PAGE
from kvstore.rpc.records import _object_location, _object_locations_in_c_loops

# every msgpack integer width (fixint, uint8/16/32/64) and its edges
WIDTH_EDGES = [0, 1, 127, 128, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]
u64 = st.one_of(st.sampled_from(WIDTH_EDGES), st.integers(0, 2**64 - 1))
size = st.one_of(st.sampled_from([x for x in WIDTH_EDGES if x < 2**63]), st.integers(0, 2**63 - 1))
text = st.text(max_size=12)
engine_copy = st.tuples(st.sampled_from([0, 1]), text, text.filter(bool), u64, u64, u64, u64, text).map(list)
# a disk record a reader on its host reads from its file (no engine): the rule of its own
file_copy = st.tuples(st.sampled_from([0, 1]), text, st.integers(0, 2**40).map(lambda n: n * PAGE), text).map(
    lambda f: [f[0], f[1], "", 0, f[2], 0, 0, "/disk/" + f[3]]
)


def entries(copy_kind: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    found = st.tuples(size, u64, st.lists(copy_kind, max_size=3)).map(list)
    return st.one_of(st.none(), found)  # None: a miss


def as_sent(reply: list[Any]) -> Any:
    """The reply as a client receives it: packed by msgpack and unpacked as the framing does."""
    return msgpack.unpackb(msgpack.packb(reply), raw=False, strict_map_key=True)


def by_record(reply: list[Any]) -> list[m.ObjectLocation | None]:
    return [None if entry is None else _object_location(entry) for entry in reply]


def assert_records(decoded: list[Any]) -> None:
    for x in decoded:
        if x is not None:
            assert type(x) is m.ObjectLocation and type(x.locations) is list
            assert all(type(loc) is m.Location for loc in x.locations)


@given(st.lists(entries(engine_copy), max_size=40))
def test_a_reply_of_the_common_shape_decodes_in_c_loops_as_record_by_record(reply: list[Any]) -> None:
    received = as_sent(reply)
    assert _object_locations_in_c_loops(received) is not None  # (the C loops took it)
    decoded = m.GetReplicas.decode_reply(received)
    assert decoded == by_record(received)
    assert [x is None for x in decoded] == [x is None for x in reply]  # misses where they were
    assert_records(decoded)
    for got, sent in zip(decoded, reply, strict=True):
        if got is not None:
            assert [list(loc) for loc in got.locations] == sent[2] and [got.size, got.checksum] == sent[:2]


@given(st.lists(entries(st.one_of(engine_copy, file_copy)), max_size=20))
def test_a_reply_with_files_to_read_decodes_as_record_by_record(reply: list[Any]) -> None:
    received = as_sent(reply)
    decoded = m.GetReplicas.decode_reply(received)
    assert decoded == by_record(received)
    assert_records(decoded)


def test_a_reply_of_misses_only_or_none_decodes() -> None:
    assert m.GetReplicas.decode_reply([]) == []
    assert m.GetReplicas.decode_reply([None, None]) == [None, None]


COPY = [0, "host-a", "127.0.0.1:5000", 1, 4096, 2**40, 7, ""]
ENTRY = [4096, 2**64 - 1, [COPY, COPY]]


def spoil(where: tuple[int, ...], value: Any) -> list[Any]:
    """A reply of several good entries and misses, one field replaced at `where` in its last entry."""
    entry = copy.deepcopy(ENTRY)
    target = entry
    for index in where[:-1]:
        target = target[index]
    target[where[-1]] = value
    return [copy.deepcopy(ENTRY), None, copy.deepcopy(ENTRY), entry]


BAD_U64 = [-1, 2**64, True, False, 1.0, "1", None, b"\x01"]
SPOILED = (
    [("size", spoil((0,), bad)) for bad in [-1, 2**63, True, 4096.0, "4096", None]]
    + [("checksum", spoil((1,), bad)) for bad in BAD_U64]
    + [("locations", spoil((2,), bad)) for bad in [None, 7, "x", {"a": 1}, (COPY,)]]
    + [("a copy", spoil((2, 1), bad)) for bad in [None, 7, "copy", tuple(COPY[:7]), COPY[:7], [*COPY, ""]]]
    + [("tier", spoil((2, 1, 0), bad)) for bad in [2, -1, True, 1.0, "0", None]]
    + [
        (field, spoil((2, 1, i), bad))
        for i, field in [(1, "host_id"), (2, "engine"), (7, "path")]
        for bad in [5, None, b"x", ["x"]]
    ]
    + [
        (field, spoil((2, 1, i), bad))
        for i, field in [(3, "region_id"), (4, "offset"), (5, "slot"), (6, "gen")]
        for bad in BAD_U64
    ]
    + [("file path", spoil((2, 1, 2), "")), ("file path", [[1, 2, [[1, "h", "", 0, PAGE, 0, 0, "disk"]]]])]
    + [("file offset", [[1, 2, [[1, "h", "", 0, PAGE + 1, 0, 0, "/disk"]]]])]
    + [("entry", [copy.deepcopy(ENTRY), bad]) for bad in [0, False, "x", {"a": 1}, [1, 2], [*ENTRY, 0]]]
)


@pytest.mark.parametrize("reply", [s[1] for s in SPOILED], ids=[s[0] for s in SPOILED])
def test_a_spoiled_field_is_refused_both_ways(reply: list[Any]) -> None:
    assert _object_locations_in_c_loops(reply) is None  # the C loops take no spoiled reply
    with pytest.raises(ProtocolError, match="malformed"):
        by_record(reply)
    with pytest.raises(ProtocolError, match="malformed"):
        m.GetReplicas.decode_reply(reply)


@pytest.mark.parametrize("reply", [None, {"a": 1}, "x", 5, (ENTRY,)])
def test_a_reply_that_is_no_list_is_refused(reply: Any) -> None:
    with pytest.raises(ProtocolError, match="malformed"):
        m.GetReplicas.decode_reply(reply)


def test_the_good_entry_the_spoiled_cases_start_from_decodes() -> None:
    reply = [copy.deepcopy(ENTRY), None, copy.deepcopy(ENTRY), copy.deepcopy(ENTRY)]
    assert _object_locations_in_c_loops(reply) == by_record(reply) == m.GetReplicas.decode_reply(reply)
    file_read = [[1, 2, [[1, "h", "", 0, PAGE, 0, 0, "/disk"]]]]
    assert m.GetReplicas.decode_reply(file_read) == by_record(file_read)
    # tuples (which msgpack does not make) are records too, as they always were: record by record
    as_tuples = [tuple(ENTRY), [*ENTRY[:2], [tuple(COPY), COPY]]]
    assert _object_locations_in_c_loops(as_tuples) is None
    assert m.GetReplicas.decode_reply(as_tuples) == by_record(as_tuples) == [by_record([ENTRY])[0]] * 2
