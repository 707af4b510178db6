"""The simulated memory-over-disk cache behind `kvstore bench trace --disk-capacity-blocks`."""

from __future__ import annotations

import pytest

from kvstore.bench.tiered_cache import TieredCache
from kvstore.bench.tiered_replay import simulate_tiered
from kvstore.bench.trace import load_timed_trace, simulate
from kvstore.errors import InvalidArgumentError
from tests.unit.kvstore.bench.test_trace import SHIPPED


def test_memory_victims_are_demoted_and_disk_victims_dropped() -> None:
    cache = TieredCache("lru", memory_capacity=2, disk_capacity=2)
    cache.admit(["a", "b", "c", "d"], hits=0)
    assert cache.memory.present == {"c", "d"} and cache.disk.present == {"a", "b"}
    assert (cache.demotions, cache.evictions) == (2, 0)
    cache.admit(["e"], hits=0)
    assert cache.disk.present == {"b", "c"} and cache.evictions == 1  # a, the oldest, left the cache
    assert cache.prefix(["b", "c", "d", "x", "e"]) == 3


def test_a_second_disk_read_within_the_window_promotes() -> None:
    cache = TieredCache("lru", memory_capacity=2, disk_capacity=4, promote_window=10)
    cache.admit(["a", "b", "c", "d"], hits=0, now=0)
    cache.admit(["a"], hits=1, now=1)  # first read from disk: stays there
    assert "a" in cache.disk.present and cache.disk_hits == 1 and cache.promotions == 0
    cache.admit(["a"], hits=1, now=20)  # too late for a promotion: the window restarts
    assert "a" in cache.disk.present and cache.promotions == 0
    cache.admit(["a"], hits=1, now=25)
    assert "a" in cache.memory.present and cache.promotions == 1
    assert cache.disk_hits == 3 and cache.memory_hits == 0
    cache.admit(["a"], hits=1, now=26)
    assert cache.memory_hits == 1


def test_without_a_disk_it_is_the_plain_cache() -> None:
    trace = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3, 7], [5, 6, 8]] * 5
    plain = simulate(trace, 3, "lru")
    tiered = simulate_tiered(trace, 3, 0, "lru")
    assert (tiered.hits, tiered.evictions) == (plain.hits, plain.evictions)
    assert tiered.disk_hits == 0 and tiered.memory_hits == plain.hits


def test_bad_capacities() -> None:
    with pytest.raises(InvalidArgumentError):
        TieredCache("lru", 0, 10)
    with pytest.raises(InvalidArgumentError):
        TieredCache("lru", 10, -1)
    with pytest.raises(InvalidArgumentError):
        TieredCache("lru", 10, 10, promote_window=-1)


@pytest.mark.skipif(not SHIPPED.exists(), reason="shipped trace not present")
def test_shipped_trace_ten_times_the_memory_on_disk_is_as_good_as_one_big_tier() -> None:
    trace, times = load_timed_trace(SHIPPED)
    one = simulate(trace, 100_000, "lru")
    tiered = simulate_tiered(trace, 10_000, 90_000, "lru", times=times, promote_window=600)
    assert one.hit_rate == pytest.approx(0.364, abs=0.002)
    assert tiered.hit_rate == pytest.approx(one.hit_rate, abs=0.002)
    assert tiered.memory_hits / tiered.blocks > 0.19  # the hot set stays in memory (10k alone: 0.211)
