"""The lease cache holds at most max_entries entries and evicts the oldest fill first; a refilled key
is the newest (its lease is), a refill of a held key evicts nothing, and a key the master found absent,
or that a read dropped (a miss or a corrupt copy), or that a removal cleared, is gone at once."""

from __future__ import annotations

import pytest

from kvstore.client.lease_cache import LeaseCache
from kvstore.errors import InvalidArgumentError, KVStoreError


def entry(n: int) -> list[object]:
    return [4096, n, [["node-a:7000", n, 4096]]]


def held(cache: LeaseCache, keys: list[str]) -> list[str]:
    return [k for k, e in zip(keys, cache.lookup(keys), strict=True) if e is not None]


KEYS = ["a", "b", "c", "d", "e"]
NOW = 1000.0  # every lease here is granted now and read now: none expires


def fresh(max_entries: int) -> LeaseCache:
    return LeaseCache(60.0, max_entries=max_entries, clock=lambda: NOW)


def test_the_oldest_fill_is_evicted_first() -> None:
    cache = fresh(3)
    for n, key in enumerate("abcd"):
        cache.fill([key], [entry(n)], granted_at=NOW)
    assert held(cache, KEYS) == ["b", "c", "d"] and len(cache) == 3
    cache.fill(["e"], [entry(4)], granted_at=NOW)
    assert held(cache, KEYS) == ["c", "d", "e"]


def test_a_batch_larger_than_the_cache_keeps_its_last_keys() -> None:
    cache = fresh(3)
    cache.fill(KEYS, [entry(n) for n in range(5)], granted_at=NOW)
    assert held(cache, KEYS) == ["c", "d", "e"]
    assert cache.lookup(["e"]) == [entry(4)]


def test_a_refilled_key_is_the_newest_and_evicts_nothing() -> None:
    cache = fresh(3)
    cache.fill(["a", "b", "c"], [entry(0), entry(1), entry(2)], granted_at=NOW)
    cache.fill(["b"], [entry(10)], granted_at=NOW)  # at capacity: nothing else goes
    assert held(cache, KEYS) == ["a", "b", "c"] and cache.lookup(["b"]) == [entry(10)]
    cache.fill(["d"], [entry(3)], granted_at=NOW)
    assert held(cache, KEYS) == ["b", "c", "d"]
    cache.fill(["e"], [entry(4)], granted_at=NOW)  # "c" is now the oldest fill, not "b"
    assert held(cache, KEYS) == ["b", "d", "e"]


def test_absent_dropped_and_cleared_keys_are_gone() -> None:
    cache = fresh(8)
    cache.fill(KEYS, [entry(n) for n in range(5)], granted_at=NOW)
    cache.fill(["a", "b"], [None, entry(11)], granted_at=NOW)  # the master no longer has "a"
    assert held(cache, KEYS) == ["b", "c", "d", "e"]
    cache.drop(["c", "x"])  # a read found "c" missing or corrupt at its cached location
    assert held(cache, KEYS) == ["b", "d", "e"] and len(cache) == 3
    cache.clear()
    assert held(cache, KEYS) == [] and len(cache) == 0


@pytest.mark.parametrize(
    ("lease_ttl", "max_entries"), [(0.0, 8), (-1.0, 8), (float("nan"), 8), (10.0, 0), (10.0, -1), (10.0, 2.5)]
)
def test_settings_that_cannot_hold_a_lease_are_refused(lease_ttl: float, max_entries: int) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        LeaseCache(lease_ttl, max_entries=max_entries)
    assert isinstance(raised.value, KVStoreError)
