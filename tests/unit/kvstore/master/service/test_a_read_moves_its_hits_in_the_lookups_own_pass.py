"""A get's lookup does the eviction policy's part of the read in its own pass through the object table
(EvictionPolicy.read_touch: the hits move last in the table's order there, and the sampled ones are named
back for the adaptive policy's shadows). The master must end in the same state as when the policy did it
after the lookup (on_access_many over every hit): the same eviction order, the same shadow hits, the same
replies, through puts, gets (prefix or not, repeats, misses), removals and evictions."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.errors import KVStoreError
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.framing import value_of
from tests.unit.kvstore.master.state_helpers import Clock, make_state, put

KiB = 1 << 10

keys = st.integers(0, 60).map(lambda i: f"blk/{i}")
steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(keys, max_size=12)),
        st.tuples(st.just("get"), st.lists(keys, max_size=20), st.booleans()),
        st.tuples(st.just("remove"), keys),
        st.tuples(st.just("evict")),
        st.tuples(st.just("tick")),
    ),
    max_size=40,
)


def cluster(policy: str) -> tuple[MasterState, Handlers, Clock]:
    clock = Clock()
    # (a 64 KiB segment holds 16 objects of 4 KiB: evictions come soon)
    state = make_state(clock, [("h0", 64 * KiB)], eviction_policy=policy, allocation_alignment=64)
    return state, Handlers(state), clock


def apply(step: tuple, state: MasterState, handlers: Handlers, clock: Clock) -> object:
    kind = step[0]
    if kind == "put":
        for key in step[1]:
            if key not in state.objects:
                with contextlib.suppress(KVStoreError):  # (full: the same on both sides)
                    put(state, key, 4 * KiB)
    elif kind == "get":
        reply = handlers.get_replicas(m.GetReplicas(keys=step[1], prefix=step[2]))
        return [_placed(where) for where in m.GetReplicas.decode_reply(value_of(reply))]
    elif kind == "remove":
        with contextlib.suppress(KVStoreError):
            state.removal.remove(step[1], force=True)
    elif kind == "evict":
        return state.removal.evict_to_watermark()
    else:
        clock.now += 50.0  # (leases run out: evictions may take what reads leased)
    return None


def _placed(where: m.ObjectLocation | None) -> tuple | None:
    """A key's reply but for its copies' generations (each cluster numbers its own)."""
    if where is None:
        return None
    return where.size, where.checksum, [tuple(copy)[:6] for copy in where.locations]


def policy_state(state: MasterState) -> tuple:
    policy = state.core.policy
    shadows = tuple((s.hits, len(s.order), len(s.ghost)) for s in getattr(policy, "_shadows", ()))
    return list(policy._order), shadows, state.counters.hits, state.counters.misses  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", ["adaptive", "lru"])
@settings(max_examples=120, deadline=None)
@given(steps=steps)
def test_a_lookups_own_touch_leaves_the_master_as_the_policys_touch_did(policy: str, steps: list) -> None:
    fused, handlers, clock = cluster(policy)
    after, after_handlers, after_clock = cluster(policy)
    after.core.policy.read_touch = lambda: None  # type: ignore[method-assign]  # (on_access_many instead)
    assert fused.core.policy.read_touch() is not None  # (the master's order is the table's)
    for step in steps:
        assert apply(step, fused, handlers, clock) == apply(step, after, after_handlers, after_clock)
        assert policy_state(fused) == policy_state(after)


def test_the_sample_named_back_is_the_policys_own() -> None:
    """The adaptive policy's shadows are told the hits whose CRC-32 its sample divides: HashOrder.sampled's
    choice over the same hits."""
    state, handlers, _ = cluster("adaptive")
    stored = [f"blk/{i}" for i in range(14)]
    for key in stored:
        put(state, key, 4 * KiB)
    told: list[list[str]] = []
    policy = state.core.policy
    policy._reference_many = told.append  # type: ignore[attr-defined,method-assign]
    handlers.get_replicas(m.GetReplicas(keys=[*stored, "absent", *stored[:3]]))
    expected = policy._ghost.sampled([*stored, *stored[:3]], policy._sample)  # type: ignore[attr-defined]
    assert told == [expected] and expected
