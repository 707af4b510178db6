"""`kvstore bench allocator`: speed and fragmentation of the segment offset allocator.

Workload: values of mixed sizes (default 4 KiB .. 1 MiB, log-uniform), a segment filled to a target
usage, then a steady state of frees and allocations of random victims. Reports allocations per second
(one Python call each, and batched through allocate_many), fragmentation (1 - largest free extent / free
bytes) in steady state, and the usage reached when the first allocation fails on a fresh fill.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from kvstore.allocator import OffsetAllocator


@dataclass
class AllocatorBenchResult:
    capacity: int
    min_size: int
    max_size: int
    allocs_per_s: float
    batched_allocs_per_s: float
    steady_fragmentation: float
    fill_usage_at_first_failure: float
    steady_usage: float


def _sizes(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.uint64)


def run(
    capacity: int = 4 << 30,
    lo: int = 4 << 10,
    hi: int = 1 << 20,
    ops: int = 200_000,
    target_usage: float = 0.85,
    seed: int = 0,
) -> AllocatorBenchResult:
    rng = np.random.default_rng(seed)
    # Fresh fill until the first failure: how much of the segment random sizes can use.
    fill = OffsetAllocator(capacity, 64)
    while fill.allocate(int(_sizes(rng, 1, lo, hi)[0])) is not None:
        pass
    fill_usage = fill.used / capacity

    alloc = OffsetAllocator(capacity, 64)
    live: list[int] = []
    while alloc.used < target_usage * capacity:
        off = alloc.allocate(int(_sizes(rng, 1, lo, hi)[0]))
        if off is None:
            break
        live.append(off)
    sizes = _sizes(rng, ops, lo, hi).tolist()
    victims = rng.integers(0, 1 << 62, ops).tolist()
    done = 0
    frag = []
    start = time.perf_counter()
    for i in range(ops):
        j = victims[i] % len(live)
        alloc.free(live[j])
        live[j] = live[-1]
        live.pop()
        off = alloc.allocate(sizes[i])
        if off is not None:
            live.append(off)
            done += 1
        if i % 10_000 == 0:
            frag.append(alloc.stats()["fragmentation"])
    single = done / (time.perf_counter() - start)
    batch = OffsetAllocator(capacity, 64)
    chunk = _sizes(rng, 4096, lo, hi // 8)
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < 1.0:
        offsets = batch.allocate_many(chunk)
        for off in offsets[offsets >= 0].tolist():
            batch.free(off)
        n += len(chunk)
    batched = n / (time.perf_counter() - start)
    return AllocatorBenchResult(
        capacity, lo, hi, single, batched, float(np.mean(frag)), fill_usage, alloc.used / capacity
    )
