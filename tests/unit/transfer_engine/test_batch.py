"""Batch semantics: slicing, per-request status, deadlines and the copy guard."""

from __future__ import annotations

import os

import numpy as np
import pytest

from transfer_engine import (
    InvalidArgumentError,
    Op,
    RequestState,
    TransferEngine,
    TransferTimeoutError,
)


@pytest.fixture
def loop() -> TransferEngine:
    with TransferEngine(transport="tcp", tcp_slice_size="64KiB", tcp_connections=3) as e:
        yield e


def test_large_request_is_sliced_and_reassembled(loop: TransferEngine) -> None:
    remote = loop.allocate(10 << 20)
    assert remote.array is not None
    remote.array[:] = np.random.default_rng(1).integers(0, 256, remote.length, dtype=np.uint8)
    local = loop.allocate(10 << 20)
    segment = loop.open_peer(loop.name)
    loop.read(local.addr, segment, remote.id, 0, remote.length)  # 160 slices over 3 connections
    assert local.array is not None and np.array_equal(local.array, remote.array)


def test_empty_batch_is_done_at_once(loop: TransferEngine) -> None:
    segment = loop.open_peer(loop.name)
    handle = loop.submit(Op.READ, [], segment, 1, [], 1)
    assert handle.wait(0) and len(handle) == 0


def test_zero_length_and_bad_op_fail_per_request(loop: TransferEngine) -> None:
    remote = loop.allocate(1 << 16)
    local = loop.allocate(1 << 16)
    segment = loop.open_peer(loop.name)
    handle = loop.submit([Op.READ, 7, Op.READ], [local.addr] * 3, segment, remote.id, [0, 0, 0], [0, 10, 10])
    assert handle.wait()
    assert list(handle.states()) == [RequestState.FAILED, RequestState.FAILED, RequestState.COMPLETED]
    assert handle.state() == RequestState.FAILED


def test_mismatched_columns_raise(loop: TransferEngine) -> None:
    segment = loop.open_peer(loop.name)
    with pytest.raises(InvalidArgumentError):
        loop.submit(Op.READ, [1, 2, 3], segment, 1, [0, 0], 10)


def test_unknown_segment_handle_fails_requests(loop: TransferEngine) -> None:
    local = loop.allocate(4096)
    handle = loop.submit(Op.READ, [local.addr], [77], 1, [0], 10)
    assert handle.wait()
    assert list(handle.states()) == [RequestState.FAILED]


def test_many_slices_complete(loop: TransferEngine) -> None:
    remote = loop.allocate(64 << 20)
    local = loop.allocate(64 << 20)
    segment = loop.open_peer(loop.name)
    offsets = np.arange(64, dtype=np.uint64) * (1 << 20)
    handle = loop.submit(Op.READ, local.addr + offsets, segment, remote.id, offsets, 1 << 20)
    assert handle.wait(30)
    assert (handle.states() == RequestState.COMPLETED).all()
    assert handle.state() == RequestState.COMPLETED


def test_deadline_marks_timed_out() -> None:
    import os
    import signal

    from tests.conftest import freeze, start_target, stop_target

    target = start_target()
    try:
        with TransferEngine(transport="tcp") as e:
            segment = e.open_peer(target.name)
            local = e.allocate(1 << 20)
            freeze(target.proc.pid)
            handle = e.submit(Op.READ, [local.addr], segment, target.shared_region, [0], 1 << 20, timeout=0.3)
            assert handle.wait(0.05) is False  # before the deadline: still pending
            assert list(handle.states()) == [RequestState.PENDING]
            assert handle.state() == RequestState.PENDING
            assert handle.wait()
            assert list(handle.states()) == [RequestState.TIMED_OUT]
            assert handle.state() == RequestState.TIMED_OUT
            with pytest.raises(TransferTimeoutError):
                handle.raise_for_status()
            os.kill(target.proc.pid, signal.SIGCONT)
    finally:
        stop_target(target)


@pytest.mark.parametrize("copy_threads", [1, 2, 64])
def test_copy_workers_leave_a_core_for_the_waiting_caller(copy_threads: int) -> None:
    # A caller waiting on its batch copies too: more workers than cores - 1 only take turns on the cores.
    cores = len(os.sched_getaffinity(0))
    with TransferEngine(transport="tcp", copy_threads=copy_threads) as engine:
        assert engine.copy_parallelism == 1 + max(1, min(copy_threads, cores - 1))
