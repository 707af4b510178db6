"""A put_start reply is encoded in C++ (csrc/meta/put_reply.h) byte for byte as msgpack-python packs the
ItemResults and Placements the handler built in Python before: placed items (one replica or several,
offsets, slots and generations of every width), items stored already, and failed ones with their code and
message; and a client decodes the handler's reply to the replicas the master recorded."""

from __future__ import annotations

import msgpack

from kvstore._meta import encode_put_reply
from kvstore.errors import KVStoreError, ObjectBusyError, ObjectExistsError, TooManyPutsError
from kvstore.master.ledger.model import Replica
from kvstore.master.planners.placement import placement_of
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state, put, started_items

Outcome = list[Replica] | KVStoreError | None


def _as_python_packed(outcomes: list[Outcome]) -> bytes:
    """The reply as the handler built it in Python (before this encoder), packed as the wire packs it."""
    results: list[m.ItemResult] = []
    for outcome in outcomes:
        if isinstance(outcome, list):
            results.append(m.ItemResult(0, "", [placement_of(r) for r in outcome]))
        elif outcome is None:
            results.append(m.ItemResult(0, "", None))
        else:
            results.append(m.ItemResult(outcome.code, str(outcome), None))
    return bytes(msgpack.packb(results, use_bin_type=True))


def _batch() -> list[m.PutItem]:
    items = [m.PutItem("stored", 4096, hash("stored") & 0xFFFF)]  # the same bytes: nothing to write
    items += [m.PutItem(f"k{i}", (i + 1) * 4096, i) for i in range(20)]  # 20 items: a wide array header
    return [*items, m.PutItem("stored", 8192, 7), m.PutItem("first", MiB, 1)]  # another value; in progress


def _state_with_history() -> MasterState:
    state = make_state(Clock(), [("h0", 64 * MiB), ("h1", 64 * MiB)])
    put(state, "stored", 4096)
    state.puts.put_start("c0", "first", 3 * MiB, 1, 1, False)  # (later offsets above 2^16)
    return state


def test_a_batch_s_outcomes_are_packed_as_msgpack_packs_them() -> None:
    state = _state_with_history()
    out: list[Outcome] = []
    state.puts.start_puts("c0", _batch(), 2, False, 0, False, out)
    assert out[0] is None and all(isinstance(o, list) and len(o) == 2 for o in out[1:21])
    assert isinstance(out[21], ObjectExistsError) and isinstance(out[22], ObjectBusyError)
    assert encode_put_reply(out) == _as_python_packed(out)


def test_the_handler_s_reply_decodes_to_what_the_master_recorded() -> None:
    state = _state_with_history()
    reply = Handlers(state).put_start(m.PutStart("c0", _batch(), 2, False, 0))
    assert isinstance(reply, Packed)
    results = started_items(reply)
    assert results[0] == m.ItemResult(0, "", None)
    for i in range(20):
        placed = results[1 + i].value
        assert results[1 + i].code == 0 and placed is not None and len(placed) == 2
        assert placed == [placement_of(r) for r in state.objects[f"k{i}"].replicas]
        assert all(type(p) is m.Placement for p in placed)
    assert results[21].code == ObjectExistsError.code and "different value" in results[21].message
    assert results[22].code == ObjectBusyError.code and "in progress" in results[22].message


def test_wide_values_and_long_messages_take_msgpack_s_wider_forms() -> None:
    state = _state_with_history()
    segment = state.objects["stored"].replicas[0].segment
    replicas = [
        Replica(segment, 0, 0, 0),
        Replica(segment, 200, 255, 127),
        Replica(segment, 1 << 16, 1 << 16, 1 << 32),
        Replica(segment, (1 << 40) + 5, (1 << 32) - 1, (1 << 64) - 1),
    ]
    long_message = TooManyPutsError("é" * 40 + " — a message past 31 bytes, not ASCII")
    outcomes: list[Outcome] = [replicas, None, long_message, [replicas[1]], []]
    assert encode_put_reply(outcomes) == _as_python_packed(outcomes)
    assert encode_put_reply([]) == msgpack.packb([])
