"""The handler's put_start places a run with no Replica per copy: StartedOutcomes keeps the run's copies as
columns and each put's outcome is an int naming them, and kvstore._meta.encode_put_reply encodes the
same bytes from them as from the Replica lists a plain caller gets. Puts placed one at a time (a repeat,
a key in progress, one that needs an eviction) stay lists of Replica among them."""

from __future__ import annotations

import msgpack
import pytest

from kvstore._meta import encode_put_reply
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.puts import StartedOutcomes
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state, put, started_items


def _state(seed: int) -> MasterState:
    state = make_state(Clock(), [("h0", 64 * MiB), ("h1", 64 * MiB), ("h2", 16 * MiB)])
    state.ledger.memory.seed(seed)  # (both states place alike)
    put(state, "stored", 4096)
    state.puts.put_start("c0", "busy", MiB, 1, 1, False)
    return state


def _batch(n: int) -> list[m.PutItem]:
    """n new puts of sizes 4-28 KiB, with a key stored already and one in progress halfway."""
    items = [m.PutItem(f"k{i}", 4096 * (1 + i % 7), i) for i in range(n)]
    alone = [m.PutItem("stored", 4096, hash("stored") & 0xFFFF), m.PutItem("busy", 1, 1)]
    return [*items[: n // 2], *alone, *items[n // 2 :]]


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_columns_encode_the_bytes_replica_lists_encode(replicas: int) -> None:
    plain_state, column_state = _state(7), _state(7)
    plain: list = []
    plain_state.puts.start_puts("c0", _batch(300), replicas, False, 0, False, plain)
    columns = StartedOutcomes()
    column_state.puts.start_puts("c0", _batch(300), replicas, False, 0, False, columns)
    assert sum(isinstance(o, int) for o in columns) == 300  # every new put placed in runs
    assert [type(o) for o in columns if not isinstance(o, int)] == [type(None), type(plain[151])]
    # each int outcome encodes as the Replica list the master recorded for its put
    as_lists = [
        column_state.objects[item.key].replicas if isinstance(o, int) else o
        for item, o in zip(_batch(300), columns, strict=True)
    ]
    reply = encode_put_reply(columns, columns.placed.columns(), column_state.ledger.objects.places)
    assert reply == encode_put_reply(as_lists)
    # and the same places as a plain caller's (generations are each master's own: a clock-seeded sequence)
    assert _places(reply, column_state) == _places(encode_put_reply(plain), plain_state)


def _places(reply: bytes, state: MasterState) -> list:
    """Each item's copies with their generation counted back from the master's next one."""
    next_gen = state.ledger.fences.generations(0)
    return [
        None if copies is None else [(e, r, o, s, next_gen - g) for e, r, o, s, g in copies]
        for _, _, copies in msgpack.unpackb(reply)
    ]


def test_the_handler_s_reply_names_the_replicas_recorded() -> None:
    state = _state(3)
    reply = Handlers(state).put_start(m.PutStart("c0", _batch(40), 2, False, 0))
    assert isinstance(reply, Packed)
    for item, result in zip(_batch(40), started_items(reply), strict=True):
        if item.key in ("stored", "busy"):
            continue
        recorded = state.objects[item.key].replicas
        assert [(p.region_id, p.offset, p.slot, p.gen) for p in result.value] == [
            (r.segment.region_id, r.offset, r.slot, r.gen) for r in recorded
        ]
        assert [p.engine for p in result.value] == [r.segment.engine for r in recorded]


def test_an_outcome_naming_copies_it_was_not_given_is_refused() -> None:
    state = _state(1)
    columns = StartedOutcomes()
    state.puts.start_puts("c0", _batch(4), 1, False, 0, False, columns)
    places = state.ledger.objects.places
    with pytest.raises(ValueError, match="past the placed copies"):
        encode_put_reply([*columns, (4 << 8) | 1], columns.placed.columns(), places)
    with pytest.raises(ValueError, match="no place"):
        encode_put_reply(columns, columns.placed.columns(), {})
