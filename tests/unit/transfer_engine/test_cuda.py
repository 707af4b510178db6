"""transfer_engine.cuda: GPU buffers from every producer kind, checked ranges, batched copies.

Without a GPU (CI) the driver-free parts run (buffer descriptions, DLPack layouts read from numpy's own
producer) and every driver call must fail with NotSupportedError; the `gpu` tests run on a GPU machine
(bench/gpu_check.sh)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from transfer_engine import NotSupportedError, TransferEngine, cuda
from transfer_engine.errors import InvalidArgumentError

needs_no_gpu = pytest.mark.skipif(cuda.available(), reason="a GPU is present: the gpu tests cover it")


@pytest.mark.parametrize(
    "args", [(0, 16, 0), (4096, 0, 0), (4096, 16, -1), (True, 16, 0), (4096.0, 16, 0), (4096, 16, "0")]
)
def test_gpu_buffer_descriptions_are_validated(args: tuple) -> None:
    with pytest.raises(InvalidArgumentError):
        cuda.GpuBuffer(*args)


def test_pieces_stay_inside_their_buffer() -> None:
    buf = cuda.GpuBuffer(1 << 40, 4096, 1)
    assert buf.piece(1024, 1024) == cuda.GpuBuffer((1 << 40) + 1024, 1024, 1)
    for offset, size in [(-1, 10), (0, 0), (4000, 100)]:
        with pytest.raises(InvalidArgumentError):
            buf.piece(offset, size)


def test_what_counts_as_a_gpu_buffer() -> None:
    class ArrayInterface:  # the protocol itself: any object exposing it is device memory
        @property
        def __cuda_array_interface__(self) -> dict:
            return {"shape": (4,), "typestr": "<f4", "data": (1 << 40, False), "version": 3}

    assert cuda.is_gpu_buffer(cuda.GpuBuffer(1 << 40, 16, 0))
    assert cuda.is_gpu_buffer(ArrayInterface())
    host = np.zeros(16, np.float32)
    assert not cuda.is_gpu_buffer(host)  # a DLPack producer, but on the CPU
    assert not cuda.is_gpu_buffer(memoryview(b"abc"))
    assert not cuda.is_gpu_buffer((1 << 40, 16))


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64, np.complex128])
def test_dlpack_layouts_are_read_from_the_producers_capsule(dtype: type) -> None:
    """numpy's own DLPack producer (CPU): the capsule's address and size are the array's."""
    array = np.arange(60, dtype=dtype).reshape(3, 4, 5)
    for view in (array, array[1:], array[2], array[1:2, 1:3].copy()):
        kind, device, address, nbytes, _capsule = cuda.dlpack_layout(view)
        assert (kind, device) == (1, 0)  # kDLCPU
        assert address == view.ctypes.data and nbytes == view.nbytes


def test_dlpack_layouts_must_be_contiguous() -> None:
    array = np.arange(64, dtype=np.float32).reshape(8, 8)
    for view in (array[:, ::2], array.T):
        with pytest.raises(InvalidArgumentError, match="contiguous"):
            cuda.dlpack_layout(view)
    with pytest.raises(InvalidArgumentError, match="DLPack"):
        cuda.dlpack_layout(object())


@needs_no_gpu
def test_every_gpu_call_fails_clearly_without_a_gpu() -> None:
    with pytest.raises(NotSupportedError, match=r"CUDA|GPU|libcuda"):
        cuda.require()
    assert not cuda.is_device_pointer(1 << 40)
    calls = [
        lambda: cuda.device_range(1 << 40),
        lambda: cuda.gpu_buffer_of(cuda.GpuBuffer(1 << 40, 16, 0)),
        lambda: cuda.copy_to_host(0, [1 << 40], [1 << 41], [16]),
        lambda: cuda.copy_to_device(0, [1 << 40], [1 << 41], [16]),
        lambda: cuda.DeviceMemory(4096),
    ]
    for call in calls:
        with pytest.raises(NotSupportedError, match=r"libcuda|CUDA|GPU"):
            call()


@pytest.mark.gpu
def test_device_ranges_and_pointer_checks() -> None:
    with cuda.DeviceMemory(1 << 20) as memory:
        base, length, device = cuda.device_range(memory.ptr + 4096)
        assert (base, device) == (memory.ptr, 0) and length >= 1 << 20
        assert cuda.gpu_buffer_of(memory.buffer.piece(4096, 4096)).ptr == memory.ptr + 4096
        with pytest.raises(InvalidArgumentError, match="runs past"):
            cuda.gpu_buffer_of(cuda.GpuBuffer(memory.ptr + 4096, length, 0))
        with pytest.raises(InvalidArgumentError, match="not of GPU"):
            cuda.gpu_buffer_of(cuda.GpuBuffer(memory.ptr, 4096, 1))
    host = np.zeros(4096, np.uint8)
    with pytest.raises(InvalidArgumentError, match="not device memory"):
        cuda.gpu_buffer_of(cuda.GpuBuffer(host.ctypes.data, host.nbytes, 0))
    assert not cuda.is_device_pointer(host.ctypes.data)


@pytest.mark.gpu
def test_a_thread_with_no_current_context_can_check_device_pointers() -> None:
    """The ordinal and range queries need a current context: a fresh thread (a server's, a caller's
    worker) gets the pointer's own before asking."""
    with cuda.DeviceMemory(1 << 20) as memory:
        got: list[object] = []
        worker = threading.Thread(target=lambda: got.append(cuda.device_range(memory.ptr + 8)))
        worker.start()
        worker.join()
        assert got and got[0][0] == memory.ptr  # type: ignore[index]


@pytest.mark.gpu
def test_batched_copies_round_trip_through_pinned_and_pageable_memory() -> None:
    rng = np.random.default_rng(1)
    source = rng.integers(0, 256, 1 << 22, dtype=np.uint8)
    with TransferEngine() as engine, cuda.DeviceMemory(1 << 22) as memory:
        pinned = engine.allocate(1 << 22, export=False, pinned=True)
        assert pinned.pinned_by == "cuda" and pinned.array is not None
        sizes = [4096, 65536, 1 << 20, (1 << 22) - (1 << 20) - 65536 - 4096]
        offsets = np.cumsum([0, *sizes[:-1]]).tolist()
        cuda.copy_to_device(
            0, [memory.ptr + o for o in offsets], [source.ctypes.data + o for o in offsets], sizes
        )
        cuda.copy_to_host(0, [memory.ptr + o for o in offsets], [pinned.addr + o for o in offsets], sizes)
        assert np.array_equal(pinned.array, source)


@pytest.mark.gpu
def test_cupy_and_torch_buffers_are_read_through_their_interfaces() -> None:
    cupy = pytest.importorskip("cupy")
    array = cupy.arange(1024, dtype=cupy.float32)
    buf = cuda.gpu_buffer_of(array[256:])
    assert (buf.ptr, buf.nbytes, buf.device) == (array.data.ptr + 1024, 3072, 0)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        cuda.gpu_buffer_of(array[::2])
    torch = pytest.importorskip("torch")
    tensor = torch.arange(1024, dtype=torch.float16, device="cuda")
    assert cuda.gpu_buffer_of(tensor).ptr == tensor.data_ptr()

    class DLPackOnly:  # a producer that speaks DLPack alone (as JAX arrays may)
        def __dlpack__(self, stream: int | None = None) -> object:
            return tensor.__dlpack__(stream=stream)

        def __dlpack_device__(self) -> tuple[int, int]:
            return tensor.__dlpack_device__()

    dl = cuda.gpu_buffer_of(DLPackOnly())
    assert (dl.ptr, dl.nbytes, dl.device) == (tensor.data_ptr(), 2048, 0)
