"""Filling the client's lease cache costs the same per key however many leases it has held (issue 42:
a dict whose head was popped kept dead slots that every eviction's `iter` walked again, so past 65,536
leases a 1,000-key fill grew from 0.3 ms to 48 ms). Only the cache's original interface is used, so the
same test runs against the code before the change, where it fails: the last tenth of the keys cost
tens of times the first (0.18 ms a batch at first, 11.7 ms last, on every try)."""

from __future__ import annotations

import gc
import statistics
import time

from kvstore.client.lease_cache import LeaseCache

MAX_ENTRIES = 1 << 14
BATCH = 1024
FILLS = 10 * MAX_ENTRIES // BATCH  # 10 x max_entries keys in all (163,840)
ENTRY = [4096, 0x1234, [["node-a:7000", 0, 4096]]]  # a located entry's shape; the cache keeps it as is
TRIES = 3  # the cost is structural (every try of the old code fails): a burst of load fails one try only


def fill_times(batches: list[list[str]]) -> tuple[LeaseCache, list[float]]:
    """Fills a fresh cache batch by batch; the seconds each fill took."""
    cache = LeaseCache(3600.0, max_entries=MAX_ENTRIES)
    found = [ENTRY] * BATCH
    took: list[float] = []
    gc_was_on = gc.isenabled()
    gc.disable()  # a collection landing in one tenth is not the cache's cost
    try:
        for keys in batches:
            start = time.perf_counter()
            cache.fill(keys, found, time.monotonic())
            took.append(time.perf_counter() - start)
    finally:
        if gc_was_on:
            gc.enable()
    return cache, took


def test_filling_ten_times_max_entries_keeps_the_per_key_cost_flat() -> None:
    batches = [[f"tenant/0x{i * BATCH + j:016x}" for j in range(BATCH)] for i in range(FILLS)]
    tenth = FILLS // 10
    seen = []
    for _ in range(TRIES):
        cache, took = fill_times(batches)
        # medians of the per-batch times: another process taking the core for a moment moves a sum
        first, last = statistics.median(took[:tenth]), statistics.median(took[-tenth:])
        seen.append(f"{first * 1e3:.2f} ms at first, {last * 1e3:.2f} ms last")
        if last < 3 * first:
            break
    else:
        raise AssertionError(f"a {BATCH}-key fill's time grew past 3x on every try: {seen}")
    # and it holds the newest max_entries keys, the older ones evicted
    assert None not in cache.lookup(batches[-1]) and None not in cache.lookup(batches[-tenth])
    assert cache.lookup([batches[-tenth - 1][-1], batches[0][0]]) == [None, None]
