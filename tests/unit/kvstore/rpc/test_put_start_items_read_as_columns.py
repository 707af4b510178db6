"""The master reads a put_start's items as columns (kvstore.rpc.put_items.PutColumns: keys, sizes,
checksums), with no PutItem per item: the columns hold what the items said, checked as before on both
paths (the batch-wide check and the item-by-item one that names the error), the columns read as the
PutItems they stand for, a parsed request goes back on the wire as the client sent it, and the master's
put path answers a batch of columns byte for byte as it answers the same batch as a list of PutItems."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kvstore.errors import InvalidArgumentError
from kvstore.master.service.handlers import Handlers
from kvstore.rpc import framing as rpc
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v
from kvstore.rpc.data_requests import PUT_ITEM_BOUNDS
from kvstore.rpc.put_items import PutColumns
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state

U64 = 2**64 - 1
WIRE = [["a", 1, 0], ["b", 2**63 - 1, U64], ["ключ", 7, 3]]  # (the last key is not ASCII: item by item)


def _params(items: Sequence[object]) -> dict[str, object]:
    return {"client_id": "c0", "items": items, "replicas": 1}


@pytest.mark.parametrize("items", [WIRE[:2], WIRE, []], ids=["plain", "item-by-item", "empty"])
def test_the_columns_hold_what_the_items_said(items: list[list[Any]]) -> None:
    request = m.parse_request("put_start", _params(items))
    assert isinstance(request, m.PutStart)
    columns = request.items
    assert type(columns) is PutColumns
    assert columns.keys == [i[0] for i in items]
    assert columns.sizes == [i[1] for i in items] and columns.checksums == [i[2] for i in items]
    assert all(type(c) is list for c in (columns.keys, columns.sizes, columns.checksums))
    assert v.put_items(_params(items), PUT_ITEM_BOUNDS) == [tuple(i) for i in items]


@pytest.mark.parametrize(
    "bad, message",
    [
        (["c", 0, 1], "size must be an integer in"),
        (["c", 1, -1], "checksum must be an integer in"),
        (["c", 1, True], "checksum must be an integer in"),
        (["", 1, 1], "keys must be non-empty"),
        (["c", 1], "each put item must be [key, size, checksum]"),
        ("c", "each put item must be [key, size, checksum]"),
    ],
)
def test_a_bad_item_fails_the_request_with_its_field_named(bad: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("[", r"\[")):
        m.parse_request("put_start", _params([*WIRE, bad]))


def test_the_columns_read_as_the_put_items_they_stand_for() -> None:
    columns = m.parse_request("put_start", _params(WIRE)).items  # type: ignore[attr-defined]
    items = [m.PutItem(*i) for i in WIRE]  # type: ignore[arg-type]
    assert columns == items and list(columns) == items and len(columns) == 3
    assert columns[1] == items[1] and type(columns[1]) is m.PutItem and columns[-1] == items[-1]
    assert type(columns[1:]) is PutColumns and columns[1:] == items[1:]
    assert columns != items[:2] and columns != "abc" and PutColumns.of(items) == columns
    assert PutColumns.of(columns) is columns


def test_a_parsed_request_goes_back_on_the_wire_as_the_client_sent_it() -> None:
    items = [m.PutItem(*i) for i in WIRE]  # type: ignore[arg-type]
    sent = m.PutStart(client_id="c0", items=items, replicas=2, pin=True)
    parsed = m.parse_request("put_start", rpc.unpack(rpc.pack(sent.params())[rpc.HEADER_SIZE :]))
    assert type(parsed.items) is PutColumns  # type: ignore[attr-defined]
    assert rpc.pack([1, "put_start", parsed.params()]) == rpc.pack([1, "put_start", sent.params()])


def test_the_master_answers_columns_as_it_answers_put_items() -> None:
    """A batch with plain new puts (a run), a stored key offered again, one stored with another value, a
    key twice (the second is a put in progress) and a put too large to place: the same replies (their
    generations counted from the master's first) and the same objects recorded, whether the handler is
    given the parsed columns or a list of PutItems."""
    wire = [[f"k{i}", 4096 * (i + 1), i] for i in range(40)]
    wire += [["stored", 4096, 5], ["stored", 8192, 5], ["k3", 4096, 3], ["huge", 1 << 40, 1]]
    wire += [[f"late{i}", 4096, i] for i in range(5)]
    replies, tables = [], []
    for parsed in (True, False):
        state = make_state(Clock(), [("h0", 64 * MiB), ("h1", 64 * MiB)])
        state.puts.put_start("c0", "stored", 4096, 5, 1, False)
        state.puts.put_end("c0", "stored")
        request = m.parse_request("put_start", _params(wire))
        assert isinstance(request, m.PutStart)
        if not parsed:
            request.items = list(request.items)
        reply = rpc.unpack(Handlers(state).put_start(request))  # type: ignore[arg-type]
        first = state.space.fences.first  # (generations start at the clock's nanoseconds: count from it)
        replies.append([[c, text, [[*p[:-1], p[-1] - first] for p in at or []]] for c, text, at in reply])
        objects = [state.objects[k] for k in state.objects]
        tables.append(sorted((o.key, o.size, o.checksum, o.complete, len(o.replicas)) for o in objects))
    assert replies[0] == replies[1] and tables[0] == tables[1]
    codes = [code for code, _, _ in replies[0]]
    assert codes[:40] == [0] * 40 and codes[-5:] == [0] * 5 and all(codes[41:44])  # (3 errors between)
    assert replies[0][40][2] == []  # "stored" with its own bytes: nothing to write
    assert len(tables[0]) == 1 + 40 + 5  # (stored, the run, the late ones)
