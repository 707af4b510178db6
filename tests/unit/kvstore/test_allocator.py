from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvstore.allocator import OffsetAllocator


def test_best_fit_and_coalescing() -> None:
    a = OffsetAllocator(1 << 20, 64)
    blocks = [a.allocate(1000) for _ in range(8)]
    assert blocks == [i * 1024 for i in range(8)]  # aligned up to 64
    for off in blocks[1::2]:
        assert a.free(off)
    assert a.stats()["free_extents"] == 4  # 3 holes; the last freed block joins the tail
    # Best fit: a 1000-byte block goes into a 1024 hole, not the tail.
    assert a.allocate(1000) == 1024
    for off in [0, 1024, *blocks[2::2]]:
        assert a.free(off)
    s = a.stats()
    assert (
        s["used"] == 0 and s["free_extents"] == 1 and s["largest_free"] == 1 << 20 and s["fragmentation"] == 0
    )


def test_edges() -> None:
    a = OffsetAllocator(4096, 64)
    assert a.allocate(0) is None
    assert a.allocate(4097) is None
    assert a.allocate(2**64 - 1) is None
    assert a.allocate(4096) == 0
    assert a.allocate(1) is None
    assert not a.free(5)  # no block starts there
    assert a.free(0) and not a.free(0)  # double free refused


def test_random_workload_never_overlaps() -> None:
    rng = np.random.default_rng(3)
    a = OffsetAllocator(64 << 20, 64)
    live: dict[int, int] = {}
    for _ in range(20000):
        if live and rng.random() < 0.45:
            off = list(live)[rng.integers(len(live))]
            assert a.free(off)
            del live[off]
        else:
            size = int(rng.integers(1, 1 << 20))
            off = a.allocate(size)
            if off is not None:
                live[off] = a.block_size(off)
                assert a.block_size(off) >= size and off % 64 == 0
    spans = sorted(live.items())
    for (o1, s1), (o2, _) in itertools.pairwise(spans):
        assert o1 + s1 <= o2
    assert a.stats()["used"] == sum(live.values())


@pytest.mark.parametrize("n", [1, 100])
def test_allocate_many(n: int) -> None:
    a = OffsetAllocator(1 << 20, 64)
    offsets = a.allocate_many(np.full(n, 4096, dtype=np.uint64))
    assert len(set(offsets.tolist())) == n
    assert (a.allocate_many(np.array([1 << 21], dtype=np.uint64)) == -1).all()


def test_reserve_takes_exactly_a_free_range() -> None:
    a = OffsetAllocator(1 << 20, 64)
    assert a.reserve(4096, 1000)  # rounded up to 1024
    assert a.block_size(4096) == 1024 and a.used == 1024
    assert not a.reserve(4096 + 512, 64)  # inside the reserved block
    assert not a.reserve(100, 64)  # misaligned
    assert not a.reserve((1 << 20) - 64, 128)  # past the end
    assert not a.reserve(0, 0)
    first = a.allocate(4096)
    assert first == 0  # the free space before the reservation is still usable
    assert a.reserve(8192, 4096)
    assert a.free(4096) and a.reserve(4096, 1024)  # freed space can be reserved again
    assert a.stats()["allocations"] == 3
