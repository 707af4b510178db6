"""The hold book in C++ (csrc/meta/hold_book, kvstore.master.ledger.holds): a node's work reply carries
its holds encoded there, byte for byte what msgpack-python made of the hold tuples the master built in
Python before (read from each object as it is now), a hold of an object gone without its cancel is never
sent, and the put path's columnar entry (hold_rows) holds recorded rows by reference."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

from kvstore.master.ledger.objects import ObjectMeta
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import framing
from kvstore.rpc import messages as m
from tests.unit.kvstore.master.state_helpers import Clock, MiB, holds_of, make_state

# Keys across msgpack's str headers (fixstr, str8, str16) and non-ASCII; values across the int widths.
KEYS = ["k", "x" * 31, "y" * 32, "z" * 255, "w" * 256, "ключ-" + "ä" * 20, "pinned"]
CHECKSUMS = [0, 127, 128, 1 << 16, 1 << 32, (1 << 64) - 1, 5]
SIZES = [1, 300, 70_000, (1 << 16) + 1, 4096, 2 * MiB, 64]


def _state() -> MasterState:
    return make_state(Clock(), [("h0", 64 * MiB), ("h1", 64 * MiB)])


def _put_all(state: MasterState) -> None:
    """A batch of new puts of two replicas (the run path) and one alone (the one-at-a-time path)."""
    items = [m.PutItem(k, s, c) for k, s, c in zip(KEYS[:-1], SIZES, CHECKSUMS, strict=False)]
    out: list[object] = []
    state.puts.start_puts("c0", items, 2, False, 0, False, out)  # type: ignore[arg-type]
    state.puts.put_start("c0", KEYS[-1], SIZES[-1], CHECKSUMS[-1], 1, True)
    state.puts.commit_puts("c0", KEYS[:3])  # some committed, the rest still being written


def _as_python_built_it(state: MasterState, held: list[m.HeldReplica]) -> list[tuple[object, ...]]:
    """The hold tuples the Python book built (seq, its replica's place, then its object's fields read
    now), checking each names a replica its object has."""
    out = []
    for h in held:
        meta: ObjectMeta = state.objects[h.key]
        (replica,) = [r for r in meta.replicas if (r.slot, r.gen) == (h.slot, h.gen)]
        seg = replica.segment
        out.append(
            (
                h.seq,
                seg.region_id,
                replica.offset,
                replica.slot,
                replica.gen,
                meta.key,
                meta.size,
                meta.checksum,
                meta.pinned,
                meta.base_replicas,
                meta.target_replicas,
            )
        )
    return out


def test_a_work_reply_frames_its_holds_as_msgpack_packed_the_tuples_python_built() -> None:
    state = _state()
    handlers = Handlers(state, epoch=3)
    _put_all(state)
    state.access.change_replica(KEYS[0], 2)  # told again, carrying a target
    told = set()
    for node in ("c0", "c1"):
        registration = state.members.clients[node].registration
        work = handlers.await_work(
            m.AwaitWork(client_id=node, wait=0, epoch=3, registration=registration)  # type: ignore[arg-type]
        )
        assert isinstance(work, m.NodeWork) and isinstance(work.holds, framing.Packed)
        frame = framing.pack([9, 0, "", work])
        sent = m.AwaitWork.decode_reply(framing.unpack(frame[framing.HEADER_SIZE :])[3]).holds
        python_built = _as_python_built_it(state, list(sent))  # type: ignore[arg-type]
        wanted = msgpack.packb([9, 0, "", list(work._replace(holds=python_built))], use_bin_type=True)
        assert frame[framing.HEADER_SIZE :] == wanted
        assert [tuple(h) for h in sent] == python_built
        assert [h.seq for h in sent] == sorted(h.seq for h in sent)
        told |= {(h.key, h.region_id, h.slot, h.gen) for h in sent}
    every = {
        (meta.key, r.segment.region_id, r.slot, r.gen)
        for meta in state.objects.values()
        for r in meta.replicas
    }
    assert told == every  # each replica of each object, once (the retold ones moved to the end)
    assert state.objects["pinned"].pinned and state.objects[KEYS[0]].target_replicas == 2


def test_a_hold_of_an_object_gone_without_its_cancel_is_never_sent_and_frees_its_waiters() -> None:
    state = _state()
    state.puts.put_start("c0", "gone", MiB, 7, 1, False)
    node = state.objects["gone"].replicas[0].segment.client_id
    released: list[bool] = []
    assert state.space.holds.when_held(
        {node: state.objects["gone"].hold_seq}, lambda: released.append(True), 5
    )
    state.ledger.drop_objects(["gone"])  # (the object's row goes; nothing cancelled its hold)
    assert state.space.holds.take(node, 100) == []
    assert released == [True]
    assert state.space.holds.stats()["holds_outstanding"] == 0


def test_hold_rows_tells_every_replica_of_recorded_rows_by_reference() -> None:
    state = _state()
    for i, key in enumerate(["a", "b", "c"]):
        state.puts.put_start("c0", key, MiB, i, 2, False)
        state.puts.put_end("c0", key)
    for node in ("c0", "c1"):
        holds_of(state, node)  # acknowledged: nothing outstanding
    woken: list[str] = []
    holds = state.space.holds
    holds._wake = woken.append  # (the node polls' wake, as the book is given it)
    refs = [state.objects[k].ref for k in ("a", "b", "c")]
    holds.hold_rows(np.array(refs, dtype=np.uint64))
    assert sorted(woken) == ["c0", "c1"]  # each node once
    told = {node: [m.HeldReplica._make(h) for h in holds.take(node, 100)] for node in ("c0", "c1")}
    for key in ("a", "b", "c"):
        seqs = [h.seq for held in told.values() for h in held if h.key == key]
        assert len(seqs) == 2 and state.objects[key].hold_seq == max(seqs)
    assert [h.key for h in told["c0"]] == ["a", "b", "c"]
    stale = state.objects["a"].ref
    state.removal.remove("a", force=True)
    outstanding = holds.stats()["holds_outstanding"]
    with pytest.raises(KeyError, match="stale"):
        holds.hold_rows([state.objects["b"].ref, stale])
    assert holds.stats()["holds_outstanding"] == outstanding  # nothing held
