"""GPU regions across two real processes: same-host GPU <-> GPU through CUDA IPC handles (the cuda_ipc
transport), and over TCP staged through host memory.

A peer's GPU memory is reached by cuda_ipc beside the peer's own transport (shm carries its host memory);
each request goes by the first transport that moves its pair of memory kinds.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import TargetProcess
from tests.helpers.target_process import pattern
from transfer_engine import (
    InvalidArgumentError,
    NotSupportedError,
    Op,
    RequestState,
    TransferEngine,
    cuda,
)
from transfer_engine.errors import CODE_NAMES

SIZE = 8 << 20


def test_without_a_driver_cuda_ipc_is_not_offered(engine: TransferEngine) -> None:
    if cuda.available():
        pytest.skip("a CUDA driver is usable here")
    assert "cuda_ipc" not in engine._core_engine().descriptor()["transports"]  # no section: not offered
    with TransferEngine() as other:
        with pytest.raises(NotSupportedError, match="cuda_ipc"):
            other.open_peer(engine.name, "cuda_ipc")
        assert other.open_peer(engine.name).transports == ("local",)
    host = np.zeros(4096, np.uint8)
    with pytest.raises(NotSupportedError):  # GPU memory is checked with the driver: none here
        engine.register_ptr(host.ctypes.data, host.nbytes, kind="gpu:0")


@pytest.mark.gpu
def test_host_memory_labelled_gpu_is_refused(engine: TransferEngine) -> None:
    host = np.zeros(4096, np.uint8)
    with pytest.raises(InvalidArgumentError):
        engine.register_ptr(host.ctypes.data, host.nbytes, kind="gpu:0")
    with cuda.DeviceMemory(1 << 20) as memory, pytest.raises(InvalidArgumentError, match="one allocation"):
        engine.register_ptr(memory.ptr + 4096, 1 << 20, kind="gpu:0")


@pytest.mark.gpu
def test_peer_gpu_memory_moves_both_ways_beside_shm(target: TargetProcess, engine: TransferEngine) -> None:
    assert target.gpu_region
    segment = engine.open_peer(target.name)
    assert segment.transports == ("shm", "cuda_ipc")
    assert segment.region(target.gpu_region).kind == "gpu:0"
    host = engine.allocate(SIZE)
    assert host.array is not None
    engine.read(host.addr, segment, target.gpu_region, 0, SIZE)  # peer GPU -> host, one batch
    assert np.array_equal(host.array, pattern(SIZE))
    with cuda.DeviceMemory(SIZE) as memory:
        mine = engine.register_ptr(memory.ptr, SIZE, kind="gpu:0")
        engine.read(mine.addr, segment, target.gpu_region, 0, SIZE)  # peer GPU -> my GPU
        host.array[:] = 0
        cuda.copy_to_host(0, [memory.ptr], [host.addr], [SIZE])
        assert np.array_equal(host.array, pattern(SIZE))
        seed = 41
        host.array[:] = pattern(SIZE, seed)
        cuda.copy_to_device(0, [memory.ptr], [host.addr], [SIZE])
        offset, length = 4099, 3 * (1 << 20) + 5
        engine.write(mine.addr + offset, segment, target.gpu_region, offset, length)  # my GPU -> peer GPU
        assert target.check("gpu", offset, length, seed + 7 * offset)
        engine.unregister(mine)
    # Host memory of the same peer still goes by shm in the same batch.
    handle = engine.submit(
        Op.READ,
        [host.addr, host.addr + SIZE // 2],
        segment,
        [target.shared_region, target.gpu_region],
        0,
        4096,
    )
    assert handle.wait(timeout=10) and list(handle.states()) == [RequestState.COMPLETED] * 2


@pytest.mark.gpu
def test_a_transport_that_cannot_move_gpu_memory_says_so(
    target: TargetProcess, engine: TransferEngine
) -> None:
    segment = engine.open_peer(target.name, "shm")
    assert segment.transports == ("shm",)
    host = engine.allocate(1 << 20)
    handle = engine.submit(Op.READ, [host.addr], segment, target.gpu_region, [0], 4096)
    assert handle.wait(timeout=10)
    assert [CODE_NAMES[int(c)] for c in handle.errors()] == ["NOT_SUPPORTED"]


@pytest.mark.gpu
@pytest.mark.parametrize("partial", [False, True])
def test_part_of_an_allocation_is_shared_only_when_allowed(partial: bool) -> None:
    """A CUDA IPC handle opens the whole allocation, so a region inside a larger one is not shared unless
    the target allows it (the peer could reach the rest of the allocation)."""
    with (
        cuda.DeviceMemory(2 << 20) as memory,
        TransferEngine(cuda_ipc_partial_allocations=partial) as target,
        TransferEngine(transport="cuda_ipc") as initiator,
    ):
        region = target.register_ptr(memory.ptr + (1 << 20), 1 << 20, kind="gpu:0", export=True)
        segment = initiator.open_peer(target.name)
        host = initiator.allocate(1 << 20)
        state, code = initiator.transfer_one(Op.READ, host.addr, segment, region.id, 0, 4096)
        assert (state, CODE_NAMES[code]) == (
            (RequestState.COMPLETED, "OK") if partial else (RequestState.FAILED, "NOT_FOUND")
        )


@pytest.mark.gpu
def test_a_peer_gpu_region_is_served_over_tcp_through_host_memory(
    target: TargetProcess, engine: TransferEngine
) -> None:
    """Peers on other hosts reach GPU regions over TCP: the target stages them through host memory."""
    segment = engine.open_peer(target.name, "tcp")
    host = engine.allocate(SIZE)
    assert host.array is not None
    engine.read(host.addr, segment, target.gpu_region, 0, SIZE)
    assert np.array_equal(host.array, pattern(SIZE))
    seed = 53
    host.array[:] = pattern(SIZE, seed)
    offset, length = 12_345, (1 << 20) + 77
    engine.write(host.addr + offset, segment, target.gpu_region, offset, length)
    assert target.check("gpu", offset, length, seed + 7 * offset)
