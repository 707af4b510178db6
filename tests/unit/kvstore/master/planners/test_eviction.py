"""Eviction policies: orders, scan resistance, and the master never evicting leased or pinned objects."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError
from kvstore.master.planners.eviction import POLICIES, AdaptivePolicy, LRUPolicy, make_policy
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import MountSegment


def test_lru_order() -> None:
    p = LRUPolicy()
    for k in "abcd":
        p.on_insert(k, 1)
    p.on_access("a")
    p.on_remove("c")
    assert list(p.candidates()) == ["b", "d", "a"] and len(p) == 3


def _hit_rate(policy_name: str, capacity: int, stream: list[str]) -> float:
    policy, present, hits = make_policy(policy_name), set(), 0
    for key in stream:
        if key in present:
            hits += 1
            policy.on_access(key)
        else:
            present.add(key)
            policy.on_insert(key, 1)
            while len(present) > capacity:
                victim = next(policy.candidates())
                present.discard(victim)
                policy.on_remove(victim)
    return hits / len(stream)


def _mixed_stream(rounds: int = 400) -> list[str]:
    """A hot set of 50 keys reused every round, drowned in one-off keys (a scan)."""
    stream = []
    for r in range(rounds):
        stream += [f"hot{i}" for i in range(50)]
        stream += [f"scan{r}-{i}" for i in range(150)]
    return stream


def test_adaptive_resists_scans_where_lru_thrashes() -> None:
    stream = _mixed_stream()
    lru, adaptive = _hit_rate("lru", 100, stream), _hit_rate("adaptive", 100, stream)
    assert lru < 0.01  # the scan flushes the hot set every round
    assert adaptive > 0.15  # most of the hot set survives


def test_adaptive_stays_lru_when_recency_wins() -> None:
    # A cyclic working set that fits: both policies hit on everything after the first pass.
    stream = [f"k{i % 80}" for i in range(20000)]
    assert _hit_rate("adaptive", 100, stream) == pytest.approx(_hit_rate("lru", 100, stream))


def test_adaptive_switches_only_on_a_full_cache_and_a_clear_lead() -> None:
    p = AdaptivePolicy()
    lru, bip = p._shadows
    lru.hits, bip.hits = 1000.0, 1300.0
    assert not p.bimodal  # still filling: the shadows model a smaller cache than the real one
    list(p.candidates())  # the first eviction: shadows start counting afresh
    assert lru.hits == bip.hits == 0.0
    lru.hits, bip.hits = 100.0, 110.0
    assert not p.bimodal  # a lead inside the counting noise keeps LRU
    lru.hits, bip.hits = 1000.0, 1300.0
    assert p.bimodal


def test_adaptive_tracks_membership() -> None:
    p = AdaptivePolicy()
    for k in ("a", "b", "c"):
        p.on_insert(k, 1)
    p.on_remove("b")
    assert sorted(p.candidates()) == ["a", "c"] and len(p) == 2


def test_registry() -> None:
    assert {"lru", "adaptive"} <= set(POLICIES)
    with pytest.raises(InvalidArgumentError):
        make_policy("clairvoyant")


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_master_evicts_leased_objects_last_and_pinned_never(policy: str) -> None:
    now = [0.0]
    state = MasterState(MasterConfig.load(eviction_policy=policy, lease_ttl=5.0), clock=lambda: now[0])
    state.members.register_client("c", "h")
    state.members.mount_segment(MountSegment("c", "127.0.0.1:1", 1, 4 << 20, "h", 1 << 20))
    for key, pin in (("pinned", True), ("leased", False), ("a", False), ("b", False)):
        state.puts.put_start("c", key, 1 << 20, 1, 1, pin)
        state.puts.put_end("c", key)
    state.access.get_replicas("leased")
    for i in range(20):  # churn: every put evicts one of a/b/the newer ones, never the protected two
        state.puts.put_start("c", f"n{i}", 1 << 20, 1, 1, False)
        state.puts.put_end("c", f"n{i}")
        assert state.core.exists("pinned") and state.core.exists("leased")
    # Background eviction never takes a leased object; a put that finds nothing else does (readers must
    # not starve writers: the node fences the leased replica off, so its readers miss).
    for i in range(20, 22):
        state.access.get_replicas(f"n{i - 2}")
        state.access.get_replicas(f"n{i - 1}")
    state.puts.put_start("c", "big", 2 << 20, 1, 1, False)
    assert (
        state.core.exists("pinned")
        and not state.core.exists("leased")
        and state.space.fences.fencing("leased")
    )
