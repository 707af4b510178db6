"""connector_bench.rates: each timed path lands in its own ConnectorBenchResult field (the plain connector
run and the hybrid / TP-mismatch cases both build their results through it)."""

from __future__ import annotations

import pytest

from kvstore.bench.connector_bench import ConnectorBenchResult, rates


def test_each_path_lands_in_its_own_fields() -> None:
    # Distinct seconds and bytes per path: a swapped pair of fields shows.
    timings = {
        "save": ([1.0, 3.0], 8_000_000_000),  # 2 GB/s, p50 2 s
        "load": ([1.0], 4_000_000_000),  # 4 GB/s, p50 1 s
        "put": ([0.5, 0.5, 4.0], 10_000_000_000),  # 2 GB/s, p50 0.5 s
        "get": ([0.25], 2_000_000_000),  # 8 GB/s, p50 0.25 s
    }
    result = ConnectorBenchResult("vllm", "m", 4, 1024, 3, *rates(timings))
    assert result.save_gbps == pytest.approx(2.0)
    assert result.load_gbps == pytest.approx(4.0)
    assert result.store_put_gbps == pytest.approx(2.0)
    assert result.store_get_gbps == pytest.approx(8.0)
    assert result.save_p50_ms == pytest.approx(2000.0)
    assert result.load_p50_ms == pytest.approx(1000.0)
    assert result.store_put_p50_ms == pytest.approx(500.0)
    assert result.store_get_p50_ms == pytest.approx(250.0)
    assert result.load_overhead == pytest.approx(0.5)


def test_a_path_without_rounds_reads_zero() -> None:
    timings = {name: ([], 0) for name in ("save", "load", "put", "get")}
    assert rates(timings) == (0.0,) * 8
