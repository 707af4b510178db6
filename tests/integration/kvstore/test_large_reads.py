"""Large same-host reads: their bytes are copied and hashed in one pass with stores around the cache
(csrc/common/xxh3_copy), into destinations of any alignment and in pieces; every read verifies."""

from __future__ import annotations

import itertools

import numpy as np

from kvstore import Store


def test_large_values_read_back_verified_into_aligned_odd_and_pieced_buffers() -> None:
    rng = np.random.default_rng(15)
    sizes = [256 << 10, (1 << 20) + 3, (3 << 20) - 77]
    with Store.embedded(segment_size="64MiB") as store:
        values = [np.frombuffer(rng.bytes(n), dtype=np.uint8) for n in sizes]
        keys = [f"large/{n}" for n in sizes]
        assert store.batch_put_from(keys, values) == [0, 0, 0]
        backing = np.zeros(sum(sizes) + 4096 * len(sizes), np.uint8)
        store.register_buffer(backing)
        for shift in (0, 5, 32):  # aligned (non-temporal stores) and not (plain stores)
            backing[:] = 0
            outs, at = [], shift
            for n in sizes:
                outs.append(backing[at : at + n])
                at += n + 4096
            assert store.batch_get_into(keys, outs) == sizes
            for out, value in zip(outs, values, strict=True):
                assert np.array_equal(out, value)
        # One value into three pieces of uneven sizes (the connectors' layout).
        n = sizes[1]
        cuts = [0, 100_003, 700_000, n]
        gaps = [np.zeros(b - a, np.uint8) for a, b in itertools.pairwise(cuts)]
        for g in gaps:
            store.register_buffer(g)
        assert store.batch_get_into_multi_buffers([keys[1]], [gaps]) == [n]
        assert np.array_equal(np.concatenate(gaps), values[1])
        assert store.stats_local.checksum_mismatches == 0
