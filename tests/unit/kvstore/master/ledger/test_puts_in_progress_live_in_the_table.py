"""The puts in progress live in the object table (csrc/meta/puts_in_progress.h): a put is charged to its
writer as the ledger records its start (PutsStarted, columns with no object per key) and ends as it is
committed (one crossing: the table says which keys had no put of the writer's, the holds each node must
acknowledge and the objects short of copies) or its object is dropped, whoever drops it. Expiry reads the
oldest first, with the master's stall credit; a replay of the records makes the same puts in progress."""

from __future__ import annotations

from kvstore.errors import NotFoundError
from kvstore.master.ledger import changes as c
from kvstore.master.ledger.fences import FenceBook
from kvstore.master.ledger.ledger import Ledger
from kvstore.rpc import messages as m
from tests.unit.kvstore.master.ledger.test_ledger_replay import Recorder, _as_mounted, _Mount
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state


def _start(state, client: str, keys: list[str], size: int = MiB, replicas: int = 1) -> list:
    out: list = []
    items = [m.PutItem(key, size, i + 1) for i, key in enumerate(keys)]
    state.puts.start_puts(client, items, replicas, False, 0, False, out)
    return out


def test_a_writers_puts_are_charged_from_start_to_end_or_drop() -> None:
    clock = Clock()
    state = make_state(clock, [("h0", 64 * MiB), ("h1", 64 * MiB)])
    pending = state.core.pending
    assert all(isinstance(x, list) for x in _start(state, "c0", ["a", "b", "c", "d"], replicas=2))
    _start(state, "c1", ["x"], size=3 * MiB)
    assert pending.held("c0") == (4, 8 * MiB) and pending.held("c1") == (1, 3 * MiB)
    assert pending.held("never-wrote") == (0, 0) and len(pending) == 5
    assert [meta.key for meta in pending.by("c0")] == ["a", "b", "c", "d"]
    assert pending.writer("x") == "c1" and pending.writer("nothing") is None

    errors, marks = state.puts.commit_puts("c0", ["a", "x", "a", "gone", "b"])
    assert [type(e) if e else None for e in errors] == [
        None,
        NotFoundError,
        NotFoundError,
        NotFoundError,
        None,
    ]
    assert "'x'" in str(errors[1]) and "'gone'" in str(errors[3])
    assert set(marks) == {"c0", "c1"}  # both nodes hold a copy of each of a, b
    assert state.objects["a"].complete and not state.objects["x"].complete
    assert pending.held("c0") == (2, 4 * MiB) and pending.writer("a") is None
    assert state.counters.puts == 2 and state.counters.put_bytes == 2 * MiB

    state.puts.put_revoke("c0", "c")  # dropped: the put ends with it
    state.core.delete(state.objects["x"])
    assert pending.held("c0") == (1, 2 * MiB) and pending.held("c1") == (0, 0)
    assert [meta.key for meta in pending.values()] == ["d"]
    assert state.stats()["pending_puts"] == 1


def test_expiry_takes_the_oldest_first_and_counts_the_masters_stalls() -> None:
    clock = Clock()
    state = make_state(clock, [("h0", 64 * MiB)], put_timeout=10.0, client_ttl=1000.0)
    _start(state, "c0", ["old1", "old2"])
    clock.now += 5
    _start(state, "c0", ["new"])
    clock.now += 6  # old1 and old2 are past their deadline, new is not
    assert [meta.key for meta in state.core.pending.expired(clock.now)] == ["old1", "old2"]
    state.credit_stall(3.0)  # the master did not run for 3 s: nobody's deadline passed during it
    assert state.core.pending.expired(clock.now) == []
    clock.now += 3.5
    state.expire()
    assert "old1" not in state.objects and "old2" not in state.objects and "new" in state.objects
    assert state.counters.reclaimed_puts == 2 and state.core.pending.held("c0") == (1, MiB)


def test_a_client_at_its_limit_is_refused_until_its_puts_end() -> None:
    clock = Clock()
    state = make_state(clock, [("h0", 64 * MiB)], client_put_objects=3)
    out = _start(state, "c0", ["a", "b", "c", "d"])
    assert [type(x).__name__ for x in out] == ["list", "list", "list", "TooManyPutsError"]
    state.puts.put_end_many("c0", ["a", "b"])
    assert [type(x).__name__ for x in _start(state, "c0", ["d", "e", "f"])] == [
        "list",
        "list",
        "TooManyPutsError",
    ]


def test_a_replay_of_the_records_makes_the_same_puts_in_progress() -> None:
    clock = Clock()
    state = make_state(clock, [("h0", 64 * MiB), ("h1", 64 * MiB)])
    recorder = Recorder(state.ledger)  # (after the mounts: they are replayed from their templates below)
    for seg in state.ledger.segments.values():
        recorder.records.insert(0, _Mount(_as_mounted(seg)))
    assert all(isinstance(x, list) for x in _start(state, "c0", [f"k{i}" for i in range(40)], MiB // 4, 2))
    _start(state, "c1", ["x", "y"])
    state.puts.commit_puts("c0", [f"k{i}" for i in range(0, 40, 3)])
    state.puts.put_revoke("c1", "y")
    assert any(type(r) is c.PutsStarted and len(r.keys) > 1 for r in recorder.records)
    replayed = Ledger(FenceBook(clock, lambda client_id: None))
    for record in recorder.records:
        replayed.apply([c.SegmentMounted(_as_mounted(record.template)) if type(record) is _Mount else record])
    table, live = replayed.objects.table, state.ledger.objects.table
    assert table.puts_count() == live.puts_count() == 40 - 14 + 1
    for client in ("c0", "c1"):
        ours, theirs = state.ledger.objects.known_writer(client), replayed.objects.known_writer(client)
        assert ours is not None and theirs is not None
        assert table.puts_held(theirs) == live.puts_held(ours)
    assert [key for key, _ in table.puts_of(0)] == [key for key, _ in live.puts_of(0)]
    later = clock.now + state.config.put_timeout + 1
    assert [key for key, _ in table.puts_expired(later)] == [key for key, _ in live.puts_expired(later)]
