"""Removals of many finished objects (remove_all, a group removed or evicted whole) go in passes over the
batch (StateCore.delete_many): their holds cancelled with each node's waiting puts checked once, the eviction
policy's removal in one step (its ghost list cut to its bound once), the table's drop in one crossing. The
master ends exactly as when each object went on its own (StateCore.delete, the loop it replaced): the same
eviction order, ghost list and shadows, objects, kills, holds, space and the same waiting puts answered,
for LRU and the adaptive policy, with leased objects left, groups, two-replica objects and earlier single
removals among them."""

from __future__ import annotations

from collections import defaultdict

import pytest

from kvstore.blocks import group_keys
from kvstore.master.ledger.changes import DiskRecordDropped, GroupsHidden, ObjectDropped, SpaceFreed
from kvstore.master.ledger.node_acks import AckWaiters
from kvstore.master.planners import eviction
from kvstore.master.planners.eviction import AdaptivePolicy
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import HeldReplica
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state

KEYS = 500


def _state(monkeypatch: pytest.MonkeyPatch, policy: str, one_at_a_time: bool) -> MasterState:
    """A master whose batch removals run in passes, or (`one_at_a_time`) by delete() of each object."""
    monkeypatch.setattr(
        eviction.secrets, "randbits", lambda bits: 0x5EED
    )  # (one seed: the same ghost hashes)
    state = make_state(Clock(), [("h0", 256 * MiB), ("h1", 256 * MiB)], eviction_policy=policy, lease_ttl=5.0)
    state.first_gen = state.space.fences.current  # type: ignore[attr-defined]  # (from the real clock)
    if one_at_a_time:
        state.removal._delete_many = lambda doomed: [state.core.delete(m) for m in doomed]  # type: ignore[method-assign]
    return state


def _fill(state: MasterState) -> dict[str, list[str]]:
    """Objects of one and two replicas and three groups of 4, the later ones' holds sent but not
    acknowledged with a put waiting on each; every 12th object leased to a reader. Returns what the
    ledger's watchers see, by key."""
    puts, holds = state.puts, state.space.holds
    keys = [f"k{i}" for i in range(KEYS)] + [k for g in range(3) for k in group_keys(f"g{g}", 4)]
    for i, key in enumerate(keys):
        puts.put_start("c0", key, 64 * 1024 + 4096 * (i % 7), 7 + i, 1 + i % 2, False)
        puts.put_end("c0", key)
        if i == KEYS // 2:  # the first half's holds acknowledged, as a node does
            for client in ("c0", "c1"):
                seqs = [HeldReplica._make(h).seq for h in holds.take(client, 1 << 20)]
                holds.acknowledge(client, max(seqs, default=0))
    answered: list[tuple[str, int]] = []
    for client in ("c0", "c1"):
        for h in map(HeldReplica._make, holds.take(client, 1 << 20)):
            holds.when_held({client: h.seq}, lambda c=client, s=h.seq: answered.append((c, s)), 60.0)
    state.answered = answered  # type: ignore[attr-defined]
    state.waiting_count = holds._acks.waiting()  # type: ignore[attr-defined]
    for key in keys[::12]:
        state.access.get_replicas(key)
    seen: dict[str, list[str]] = defaultdict(list)
    for kind in (SpaceFreed, ObjectDropped, DiskRecordDropped):
        state.ledger.watch(kind, lambda records: [seen[r.key].append(type(r).__name__) for r in records])
    state.ledger.watch(
        GroupsHidden, lambda records: [seen[k].append("hidden") for r in records for k in r.keys]
    )
    return seen


def _end_state(state: MasterState) -> dict[str, object]:
    policy, fences, holds = state.core.policy, state.space.fences, state.space.holds
    base = state.first_gen  # type: ignore[attr-defined]  # (generations compared from each master's first)
    out: dict[str, object] = {
        "order": list(policy.candidates()),
        "objects": sorted(state.objects),
        "kills": {
            c: [
                (
                    k.id,
                    k.segment.id,
                    k.slot,
                    k.gen - base,
                    k.held_offset,
                    k.key,
                    k.until,
                    k.buried and k.buried - base,
                )
                for k in fences.take(c, 1 << 20)
            ]
            for c in ("c0", "c1")
        },
        "answered": sorted(state.answered),  # type: ignore[attr-defined]
        "holds": {
            c: [h._replace(gen=h.gen - base) for h in map(HeldReplica._make, holds.take(c, 1 << 20))]
            for c in ("c0", "c1")
        },
        "used": [s.allocator.used for s in state.space.segments.values()],
        "allocations": [s.allocations for s in state.space.segments.values()],
        "stored": state.ledger.stored_bytes,
        "fencing": sorted(k for k in (f"k{i}" for i in range(KEYS)) if fences.fencing(k)),
    }
    if isinstance(policy, AdaptivePolicy):
        ghost = []
        while (h := policy._ghost.pop_first()) is not None:
            ghost.append(h)
        out["ghost"] = ghost
        out["shadows"] = [(s.hits, len(s.order), len(s.ghost)) for s in policy._shadows]
    return out


def _own(records: dict[str, list[str]]) -> dict[str, list[str]]:
    return {key: [r for r in rs if r != "hidden"] for key, rs in records.items()}


def _hidden(records: dict[str, list[str]]) -> list[str]:
    return sorted(key for key, rs in records.items() for r in rs if r == "hidden")


@pytest.mark.parametrize("policy", ["lru", "adaptive"])
def test_remove_all_ends_as_each_object_removed_alone(monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    ends, records, removed = [], [], []
    for one_at_a_time in (False, True):
        state = _state(monkeypatch, policy, one_at_a_time)
        seen = _fill(state)
        state.removal.remove("g2#1of4")  # (a group goes whole)
        state.removal.remove("k24", force=True)  # (leased: fenced while its lease lasts)
        for key in ("k3", "k40", "k41"):
            state.removal.remove(key)
        removed.append(state.removal.remove_all(force=False))
        ends.append(_end_state(state))
        records.append(dict(seen))
    assert removed[0] == removed[1] and len(removed[0]) > KEYS * 0.8
    assert ends[0] == ends[1]
    # Each key's records of its own in the same order; a group is hidden once (its members' copies are
    # freed first now: the group hides when the batch drops them, not at its first member's drop)
    assert _own(records[0]) == _own(records[1])
    assert _hidden(records[0]) == _hidden(records[1]) == sorted(group_keys("g2", 4) + group_keys("g0", 4))
    end = ends[0]
    assert len(end["order"]) == len(end["objects"]) > 30  # type: ignore[arg-type]  # (the leased stay)
    assert 0 < len(end["answered"]) < len(removed[0])  # type: ignore[arg-type]  # (some wait on leased ones)
    assert end["fencing"]  # (k24, and every leased one of a group)
    if policy == "adaptive":  # the ghost was cut to 4 x the order's length: the bound did bind
        assert len(end["ghost"]) == 4 * len(end["order"])  # type: ignore[arg-type]


def test_forced_remove_all_ends_as_each_object_removed_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    ends = []
    for one_at_a_time in (False, True):
        state = _state(monkeypatch, "adaptive", one_at_a_time)
        _fill(state)
        assert len(state.removal.remove_all(force=True)) == KEYS + 12
        ends.append(_end_state(state))
    assert ends[0] == ends[1]
    assert ends[0]["objects"] == [] and ends[0]["used"] == [0, 0]
    assert ends[0]["holds"] == {"c0": [], "c1": []}  # (every unacknowledged hold cancelled ...)
    assert len(ends[0]["answered"]) == state.waiting_count > 100  # type: ignore[arg-type, attr-defined]


def test_the_waiting_puts_are_checked_once_a_node_per_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _state(monkeypatch, "adaptive", False)
    _fill(state)
    checks: list[str] = []
    check = AckWaiters.check
    monkeypatch.setattr(
        AckWaiters, "check", lambda self, client: (checks.append(client), check(self, client))
    )
    removed = state.removal.remove_all(force=True)
    assert len(removed) == KEYS + 12
    assert sorted(checks) == ["c0", "c1"]  # (one check per freed copy before: 750 of them)
    assert len(state.answered) == state.waiting_count  # type: ignore[attr-defined]  # (... and all answered)
