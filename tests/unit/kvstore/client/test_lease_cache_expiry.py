"""The lease cache never returns an entry past half its lease, and drops expired entries without ever
sweeping the whole cache: a lookup drops those it meets, a fill a bounded few from the oldest per key it
adds, the heartbeat's take_touches a bounded number more (issue 42: expired entries were never dropped,
so an idle client kept up to 65,536 dead leases' replica lists)."""

from __future__ import annotations

from kvstore.client.lease_cache import (
    EXPIRED_DROPS_PER_FILLED_KEY,
    EXPIRED_DROPS_PER_HEARTBEAT,
    LeaseCache,
)


class Clock:
    """A clock the test moves (the cache reads it as it would time.monotonic)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry(n: int) -> list[object]:
    return [4096, n, [["node-a:7000", n, 4096]]]


def keys(prefix: str, n: int) -> list[str]:
    return [f"{prefix}/0x{i:016x}" for i in range(n)]


def test_an_entry_is_returned_until_half_its_lease_and_never_after() -> None:
    clock = Clock()
    cache = LeaseCache(10.0, clock=clock)  # valid 5 s from the grant
    cache.fill(["a", "b"], [entry(1), entry(2)], granted_at=clock.now)
    clock.now += 4.999
    assert cache.lookup(["a", "b", "c"]) == [entry(1), entry(2), None]
    clock.now += 0.001
    assert cache.lookup(["a"]) == [None]
    assert len(cache) == 1  # the expired entry the lookup met is gone; "b" waits for its own turn
    assert cache.lookup(["b"]) == [None] and len(cache) == 0


def test_a_refill_renews_the_lease() -> None:
    clock = Clock()
    cache = LeaseCache(10.0, clock=clock)
    cache.fill(["a"], [entry(1)], granted_at=clock.now)
    clock.now += 4
    cache.fill(["a"], [entry(2)], granted_at=clock.now)
    clock.now += 4
    assert cache.lookup(["a"]) == [entry(2)]


def test_a_lease_that_lapsed_before_its_reply_is_not_kept() -> None:
    clock = Clock()
    cache = LeaseCache(10.0, clock=clock)
    cache.fill(["a"], [entry(1)], granted_at=clock.now)
    clock.now += 6  # the master's reply came after half the lease
    cache.fill(["a"], [entry(2)], granted_at=clock.now - 6)
    assert len(cache) == 0 and cache.lookup(["a"]) == [None]


def test_fills_drop_expired_entries_in_bounded_steps() -> None:
    clock = Clock()
    cache = LeaseCache(10.0, clock=clock)
    cache.fill(keys("old", 100), [entry(i) for i in range(100)], granted_at=clock.now)
    clock.now += 6
    cache.fill(["new"], [entry(0)], granted_at=clock.now)
    assert len(cache) == 100 - EXPIRED_DROPS_PER_FILLED_KEY + 1  # a few per key: no sweep of all 100
    cache.fill(keys("more", 10), [entry(i) for i in range(10)], granted_at=clock.now)
    assert len(cache) == 100 - 11 * EXPIRED_DROPS_PER_FILLED_KEY + 11
    assert cache.lookup(keys("old", 100)) == [None] * 100  # what is left is never returned either
    assert len(cache) == 11


def test_the_heartbeat_drops_a_bounded_number_of_expired_entries() -> None:
    clock = Clock()
    cache = LeaseCache(10.0, max_entries=3 * EXPIRED_DROPS_PER_HEARTBEAT, clock=clock)
    many = keys("old", EXPIRED_DROPS_PER_HEARTBEAT + 10)
    cache.fill(many, [entry(i) for i in range(len(many))], granted_at=clock.now)
    clock.now += 3
    cache.fill(["live"], [entry(0)], granted_at=clock.now)
    cache.served(["live"])
    clock.now += 3  # the old ones have expired, "live" has not
    assert cache.take_touches() == ["live"]
    assert len(cache) == 11  # 4096 dropped by the beat, 10 old ones and "live" left
    assert cache.drop_expired(100) == 10
    assert len(cache) == 1 and cache.lookup(["live"]) == [entry(0)]


def test_an_expired_entry_behind_a_live_one_is_never_returned() -> None:
    """Two threads' fills can land out of lease order: the later-granted one first. The earlier one
    then sits behind a live head, out of the fills' reach until that expires; a lookup still refuses
    it and drops it."""
    clock = Clock()
    cache = LeaseCache(10.0, clock=clock)
    cache.fill(["late"], [entry(2)], granted_at=clock.now)
    cache.fill(["early"], [entry(1)], granted_at=clock.now - 4)
    clock.now += 2  # "early" expired (granted 6 s ago), "late" not
    cache.fill(["other"], [entry(3)], granted_at=clock.now)
    assert len(cache) == 3  # the head is live: the fill's steps stop there
    assert cache.lookup(["early", "late"]) == [None, entry(2)]
    assert len(cache) == 2
