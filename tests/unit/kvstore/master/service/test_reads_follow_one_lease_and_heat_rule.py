"""Every read path of the master applies the one lease and heat rule (csrc/meta/object_use, through the
ledger's use methods), each with its own part of it: a lookup of one key (get_replicas) or of a batch
(locate_many) leases the object (a group member its whole group) and counts a read; a read a client served
itself (touch) counts one but leases nothing; a prefix match neither. Every use sets last_access, decays
the heat by the half-life and adds one, and draws replication's attention when the object is hot, short of
the copies its put asked for, or has a count set by change_replica.

The expected fields are computed here from the rule's definition, step by step, and compared with the
table after every step; so is the rate the replication planner plans by, against the heat the table keeps.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

import pytest

from kvstore.master.service.state import MasterState
from tests.unit.kvstore.master.state_helpers import Clock, MiB, clock, make_state

__all__ = ["clock"]  # (the fixture)

HALF_LIFE, LEASE_TTL, HOT_RATE = 2.0, 0.5, 10.0
HOT_HEAT = HOT_RATE * HALF_LIFE / math.log(2)  # the heat whose rate reaches hot_access_rate
VISIBLE = {"hot", "cold", "set", "short", "g#0of2", "g#1of2"}
COMMITTED = VISIBLE | {"h#0of2"}  # h#0of2: a member of a group missing h#1of2, hidden from readers
GROUPS = {"g#0of2": ("g#0of2", "g#1of2"), "g#1of2": ("g#0of2", "g#1of2")}  # shown whole
IN_TABLE = sorted(COMMITTED | {"writing"})  # writing: a put in progress

# (seconds since the step before, path, keys): a burst that makes "hot" hot, sparse uses of every path,
# keys absent, hidden or still being written, a key twice in one call, pauses long enough for heat to decay,
# and a clock that does not move between two steps.
STEPS: list[tuple[float, str, list[str]]] = [
    *[(0.01, "get", ["hot"])] * 30,
    *[(0.01, "batch", ["hot", "cold"])] * 30,
    (3.0, "touch", ["cold", "writing", "absent", "h#0of2", "g#1of2"]),
    (0.0, "match", ["cold", "set", "absent", "hot"]),
    (0.1, "get", ["writing"]),
    (0.1, "get", ["h#0of2"]),
    (1.5, "get", ["set"]),
    (0.3, "get", ["g#0of2"]),
    (0.2, "batch", ["g#1of2", "short", "absent", "h#0of2", "writing"]),
    (7.25, "touch", ["hot", "hot"]),
    (0.0, "get", ["short"]),
    *[(0.02, "match", ["hot", "cold", "g#0of2"])] * 20,
    (11.0, "batch", ["cold"]),
    (0.4, "touch", ["set"]),
]


@dataclass
class Fields:
    """What the rule writes of one object."""

    lease_until: float
    last_access: float
    access_count: int
    heat: float
    heat_time: float


def fields(state: MasterState, key: str) -> Fields:
    meta = state.objects[key]
    return Fields(meta.lease_until, meta.last_access, meta.access_count, meta.heat, meta.heat_time)


def decayed(f: Fields, now: float) -> float:
    return f.heat * 0.5 ** (max(0.0, now - f.heat_time) / HALF_LIFE)


def use(f: Fields, now: float, lease: bool, count: bool) -> None:
    """The rule's definition: one use of the object at `now`."""
    if lease:
        f.lease_until = max(f.lease_until, now + LEASE_TTL)
    f.last_access = now
    f.access_count += count
    f.heat = decayed(f, now) + 1.0
    f.heat_time = now


def expect(model: dict[str, Fields], path: str, keys: list[str], now: float) -> list[str]:
    """Applies a step to the model as the rule says for `path`; returns the keys it used."""
    if path == "match":
        used = leading_run(keys)
    else:
        used = [key for key in keys if key in (COMMITTED if path == "touch" else VISIBLE)]
    lease = path in ("get", "batch")
    for key in used:
        if lease:
            for member in GROUPS.get(key, ()):
                f = model[member]
                f.lease_until = max(f.lease_until, now + LEASE_TTL)
        use(model[key], now, lease, count=path != "match")
    return used


def run(state: MasterState, path: str, keys: list[str]) -> None:
    access = state.access
    if path == "get":
        (key,) = keys
        found = access.get_replicas(key)
        assert (found is not None) == (key in VISIBLE)
    elif path == "batch":
        access.locate_many(keys, False)
    elif path == "touch":
        access.touch(keys)
    else:
        matched = access.match_prefix(keys)
        assert [meta.key for meta in matched] == leading_run(keys)


def leading_run(keys: list[str]) -> list[str]:
    """What a prefix match finds: the keys stored before the first that is not."""
    first_absent = next((i for i, key in enumerate(keys) if key not in VISIBLE), len(keys))
    return keys[:first_absent]


def stored(clock: Clock) -> MasterState:
    state = make_state(
        clock,
        [("h0", 64 * MiB), ("h1", 64 * MiB)],
        hot_access_rate=HOT_RATE,
        heat_half_life=HALF_LIFE,
        lease_ttl=LEASE_TTL,
    )
    puts = state.puts
    for key in ("hot", "cold", "set", "g#0of2", "g#1of2", "h#0of2"):
        puts.put_start("c0", key, MiB, 7, 1, False)
        puts.put_end("c0", key)
    puts.put_start("c0", "short", MiB, 7, 3, False, min_replicas=1)  # 2 copies: only 2 segments
    puts.put_end("c0", "short")
    puts.put_start("c0", "writing", MiB, 7, 1, False)
    state.access.change_replica("set", 2)  # a count set by a user: attention on every use
    short = state.objects["short"]
    assert (short.replica_count, short.base_replicas) == (2, 3)
    assert not state.objects["h#0of2"].visible and state.objects["g#0of2"].visible
    return state


def attention(state: MasterState, key: str, f: Fields) -> bool:
    meta = state.objects[key]
    return f.heat >= HOT_HEAT or meta.replica_count < meta.base_replicas or meta.target_replicas != 0


def test_every_read_path_writes_the_fields_the_rule_says(clock: Clock) -> None:
    state = stored(clock)
    model = {key: fields(state, key) for key in IN_TABLE}
    met = set()
    for step, (pause, path, keys) in enumerate(STEPS):
        clock.now += pause
        state.replicator.touched.clear()
        run(state, path, keys)
        used = expect(model, path, keys, clock.now)
        for key in IN_TABLE:
            got, want = astuple(fields(state, key)), astuple(model[key])
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12), (step, key)
        drawn = {key for key in used if attention(state, key, model[key])}
        assert state.replicator.touched == drawn, step
        met.update((key in drawn, key) for key in used)
    # Both sides of the attention test were met: hot by heat, short and set by copies, cold never.
    assert {(True, "hot"), (False, "hot"), (True, "short"), (True, "set"), (False, "cold")} <= met
    assert (True, "cold") not in met


def test_the_replication_planner_plans_by_the_heat_the_table_keeps(clock: Clock) -> None:
    state = stored(clock)
    model = {key: fields(state, key) for key in IN_TABLE}
    replicator = state.replicator
    for pause, path, keys in STEPS:
        clock.now += pause
        run(state, path, keys)
        expect(model, path, keys, clock.now)
        for key in IN_TABLE:
            meta, f = state.objects[key], model[key]
            kept = meta.heat * 0.5 ** (max(0.0, clock.now - meta.heat_time) / HALF_LIFE)
            rate = replicator.rate(meta)
            assert rate == pytest.approx(kept * math.log(2) / HALF_LIFE, rel=1e-12, abs=1e-12)
            assert rate == pytest.approx(decayed(f, clock.now) * math.log(2) / HALF_LIFE, rel=1e-12)
    hot = state.objects["hot"]
    before = replicator.rate(hot)
    clock.now += HALF_LIFE  # no read: the rate halves with the heat
    assert replicator.rate(hot) == pytest.approx(before / 2, rel=1e-12) and before > 0
    assert replicator.desired(hot) == hot.base_replicas  # cold again by now: back to its put's count


def test_a_read_field_is_written_by_the_ledger_only(clock: Clock) -> None:
    state = stored(clock)
    meta = state.objects["hot"]
    for name in ("lease_until", "last_access", "access_count", "heat", "heat_time", "loaded_at", "hold_seq"):
        with pytest.raises(AttributeError):
            setattr(meta, name, 1)
    state.ledger.loaded(meta, clock.now)
    assert meta.loaded_at == clock.now
