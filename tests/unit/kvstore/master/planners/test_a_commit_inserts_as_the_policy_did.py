"""The eviction policy's insertion of committed puts runs in the commit's crossing of the object table
(EvictionPolicy.insert_last, Ledger.end_puts' link and sample): each object committed goes last in the
policy's order, and the keys of the policy's sample are named back for its shadows. The master ends up as
it did when the policy inserted the keys itself afterwards (on_insert_many): the same eviction order, the
same shadow caches and hits, for LRU and the adaptive policy, with keys not committed (absent, another's,
named twice) left out; while bimodal insertion leads, the policy still places each key by its own rule."""

from __future__ import annotations

import pytest

from kvstore._meta import HashOrder
from kvstore.master.planners.eviction import AdaptivePolicy, EvictionPolicy
from kvstore.master.service.state import MasterState
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state


def _state(policy: str, inserted_after: bool) -> MasterState:
    """A master whose policy inserts in the commit (or, `inserted_after`, by on_insert_many as before)."""
    state = make_state(Clock(), [("h0", 256 * MiB), ("h1", 256 * MiB)], eviction_policy=policy)
    if inserted_after:
        state.core.policy.insert_last = lambda: None  # type: ignore[method-assign]
    return state


def _put_batches(state: MasterState) -> None:
    """Batches of puts ended in one call each, with keys that are not committed among them."""
    puts = state.puts
    for b in range(6):
        keys = [f"b{b}/k{i}" for i in range(300)]
        for key in keys:
            puts.put_start("c0", key, 4096, 7, 1, False)
        ended = [*keys[:150], "never-started", keys[3], *keys[150:]]  # (keys[3] twice: the second misses)
        errors = puts.put_end_many("c0", ended)
        assert [i for i, e in enumerate(errors) if e is not None] == [150, 151]
    puts.put_start("c1", "another's", 4096, 7, 1, False)
    assert puts.put_end_many("c0", ["another's"])[0] is not None


def _shadows(policy: EvictionPolicy) -> list[tuple[float, int, int]]:
    assert isinstance(policy, AdaptivePolicy)
    return [(s.hits, len(s.order), len(s.ghost)) for s in policy._shadows]


@pytest.mark.parametrize("policy", ["lru", "adaptive"])
def test_the_commit_leaves_the_order_and_the_shadows_as_the_policy_did(policy: str) -> None:
    states = [_state(policy, inserted_after) for inserted_after in (False, True)]
    for state in states:
        _put_batches(state)
    in_commit, after = (list(s.core.policy.candidates()) for s in states)
    assert in_commit == after and len(in_commit) == 6 * 300
    assert in_commit[:3] == ["b0/k0", "b0/k1", "b0/k2"] and in_commit[-1] == "b5/k299"
    if policy == "adaptive":
        assert _shadows(states[0].core.policy) == _shadows(states[1].core.policy)
        assert _shadows(states[0].core.policy)[0][1] > 0  # (the shadows saw the sample)


def test_the_commit_names_the_sample_the_policy_would_pick() -> None:
    state = _state("adaptive", False)
    policy = state.core.policy
    assert isinstance(policy, AdaptivePolicy)
    order, sample = policy.insert_last() or (None, None)
    assert order == state.core.memory_order.table_order and sample == policy._sample
    keys = [f"s/{i}" for i in range(400)]
    for key in keys:
        state.puts.put_start("c0", key, 4096, 7, 1, False)
    ended = state.core.ledger.end_puts("c0", [*keys, "absent"], order, sample)
    assert ended.ended == keys
    assert ended.sampled == HashOrder(1).sampled(keys, sample) and 20 < len(ended.sampled) < 100
    assert list(state.core.memory_order) == keys  # (linked last, in order)


def test_while_bimodal_insertion_leads_each_key_goes_first_by_the_policy_s_rule() -> None:
    state = _state("adaptive", False)
    policy = state.core.policy
    assert isinstance(policy, AdaptivePolicy)
    for key in ("old0", "old1"):
        state.puts.put_start("c0", key, 4096, 7, 1, False)
        state.puts.put_end("c0", key)
    policy._full = True  # the cache filled, and bimodal insertion's shadow leads by far
    policy._shadows[1].hits = 1000.0
    assert policy.bimodal and policy.insert_last() is None
    for key in ("new0", "new1"):
        state.puts.put_start("c0", key, 4096, 7, 1, False)
    assert state.puts.put_end_many("c0", ["new0", "new1"]) == [None, None]
    assert list(policy.candidates()) == ["new1", "new0", "old0", "old1"]  # (first to go: one-off keys)
