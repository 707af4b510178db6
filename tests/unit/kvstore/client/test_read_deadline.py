"""The deadline plumbing of the gets: what a deadline may be, where it comes from (the connectors'
load_deadline_ms, KVSTORE_LOAD_DEADLINE_MS), what a key not read by it reports (LATE:
DeadlineExceededError's code), and that a deadline cut through a real batch (an embedded store: same-process
copies) leaves a run of verified keys, LATE for the rest, and nothing written after the call returns."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import pytest

from kvstore import Store
from kvstore.client.deadline import LONGEST_SECONDS, Deadline, transfer_timeout
from kvstore.client.store import LATE, MISS
from kvstore.config import StoreConfig
from kvstore.errors import DeadlineExceededError, InvalidArgumentError, error_for_code
from kvstore.integrations.paged import CONNECTOR_SETTINGS, store_settings

MiB = 1 << 20


@pytest.mark.parametrize("bad", [0, -0.01, math.nan, math.inf, LONGEST_SECONDS * 2, "0.05", True, [1]])
def test_a_deadline_is_a_positive_finite_number_of_seconds(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="deadline"):
        Deadline.after(bad)  # type: ignore[arg-type]


def test_a_deadline_counts_from_the_call_and_rounds_the_engine_timeout_up() -> None:
    assert Deadline.after(None) is None and transfer_timeout(None) is None
    before = time.monotonic()
    deadline = Deadline.after(0.0505)
    assert deadline is not None and before + 0.0505 <= deadline.at <= time.monotonic() + 0.0505
    assert 0.050 < deadline.engine_timeout() <= 0.051  # whole ms, never before the deadline
    assert not deadline.passed() and 0 < deadline.left() <= 0.0505
    past = Deadline(time.monotonic() - 1)
    assert past.passed() and past.left() == 0 and past.engine_timeout() == 0


def test_a_late_key_has_its_own_code_and_error() -> None:
    assert -DeadlineExceededError.code == LATE and LATE != MISS
    error = error_for_code(DeadlineExceededError.code, "late")
    assert isinstance(error, DeadlineExceededError) and isinstance(error, TimeoutError)


def test_the_load_budget_is_a_connector_setting_with_an_environment_fallback() -> None:
    assert "load_deadline_ms" in CONNECTOR_SETTINGS
    assert store_settings({"load_deadline_ms": 50}) == {"load_deadline_ms": 50}
    assert StoreConfig.load({}).load_deadline_ms == 0  # none unless asked
    assert StoreConfig.load({"KVSTORE_LOAD_DEADLINE_MS": "75"}).load_deadline_ms == 75
    assert StoreConfig.load({"KVSTORE_LOAD_DEADLINE_MS": "75"}, load_deadline_ms=20).load_deadline_ms == 20
    for bad in (-1, 3_600_001):
        with pytest.raises(InvalidArgumentError, match="load_deadline_ms"):
            StoreConfig.load({}, load_deadline_ms=bad).validate()


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store.embedded("160MiB") as store:
        yield store


def test_every_get_refuses_a_bad_deadline_before_it_reads(store: Store) -> None:
    buffer = np.zeros(16, np.uint8)
    calls = [
        lambda: store.get_blocks(["k"], [buffer], deadline=-1),
        lambda: store.batch_get_into(["k"], [buffer], deadline=0),
        lambda: store.batch_get_into_multi_buffers(["k"], [[buffer]], deadline=math.nan),
        lambda: store.batch_get_into_pieces(["k"], [buffer.ctypes.data], [16], [1], deadline="1"),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError, match="deadline"):
            call()


def test_a_generous_deadline_reads_what_a_get_without_one_reads(store: Store) -> None:
    keys = [f"generous/{i}" for i in range(8)]
    values = [np.full(64 << 10, i, np.uint8) for i in range(8)]
    assert store.batch_put_from(keys, values) == [0] * 8
    out = [np.zeros(64 << 10, np.uint8) for _ in range(9)]
    assert store.get_blocks([*keys, "generous/absent"], out, deadline=5.0) == 8
    assert all(np.array_equal(a, b) for a, b in zip(out, values, strict=False))
    assert store.batch_get_into([*keys, "generous/absent"], out, deadline=5.0) == [64 << 10] * 8 + [MISS]


def test_a_deadline_cut_through_a_batch_leaves_verified_keys_and_nothing_late(store: Store) -> None:
    """64 x 1 MiB read with 1 ms: whatever the machine's speed, each key is its whole verified value or
    LATE, get_blocks' run is the leading verified keys, and the caller's memory does not change once the
    call returned (the copies still queued are fenced off)."""
    n = 64
    keys = [f"cut/{i}" for i in range(n)]
    values = [np.full(MiB, i + 1, np.uint8) for i in range(n)]
    assert store.batch_put_from(keys, values) == [0] * n
    memory = np.zeros(n * MiB, np.uint8)
    store.register_buffer(memory)
    buffers = [memory[i * MiB : (i + 1) * MiB] for i in range(n)]
    try:
        for _ in range(3):
            store.leases.clear()
            memory[:] = 0xEE
            results = store.batch_get_into(keys, buffers, deadline=0.001)
            returned = memory.copy()
            time.sleep(0.2)
            assert np.array_equal(memory, returned)
            assert set(results) <= {MiB, LATE}
            for result, buffer, value in zip(results, buffers, values, strict=True):
                assert result == LATE or np.array_equal(buffer, value)
            memory[:] = 0xEE
            run = store.get_blocks(keys, buffers, deadline=0.001)
            returned = memory.copy()
            time.sleep(0.2)
            assert np.array_equal(memory, returned)
            assert all(np.array_equal(buffers[i], values[i]) for i in range(run))
        assert store.batch_get_into(keys, buffers) == [MiB] * n  # the engine is fine afterwards
    finally:
        store.unregister_buffer(memory)
