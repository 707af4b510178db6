"""GPU memory as this build sees it. The CUDA driver is loaded at run time (dlopen("libcuda.so.1")), so
kvstore builds, installs and imports without CUDA; on a machine without a driver or GPU every GPU call
fails with one clear NotSupportedError (`require()` says why).

A GPU buffer is anything exposing the CUDA array interface (cupy, torch, numba, JAX), a DLPack producer
on a CUDA device, or a raw device pointer given as `GpuBuffer(ptr, nbytes, device)`. `gpu_buffer_of`
turns any of them into a checked GpuBuffer; `copy_to_host` / `copy_to_device` move batches of pieces
between GPU and host memory on one of the device's streams, without the interpreter lock.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from transfer_engine import _core
from transfer_engine.errors import InvalidArgumentError, NotSupportedError

_KDL_CUDA = 2  # DLPack device types: kDLCUDA; kDLCUDAHost (3) is pinned host memory, not a GPU buffer
_KDL_CUDA_MANAGED = 13


def require() -> None:
    """Raises NotSupportedError (saying why) unless a CUDA driver and at least one GPU are usable."""
    _core.cuda_require()


def device_count() -> int:
    """GPUs the driver sees (0 without a driver)."""
    return int(_core.cuda_device_count())


def available() -> bool:
    try:
        require()
    except NotSupportedError:
        return False
    return True


def device_range(ptr: int) -> tuple[int, int, int]:
    """(base, length, device) of the device allocation holding `ptr`; InvalidArgumentError when `ptr` is
    not device memory of this process, NotSupportedError without a GPU."""
    base, length, device = _core.cuda_device_range(ptr)
    return int(base), int(length), int(device)


def is_device_pointer(ptr: int) -> bool:
    """True when a driver is loaded and `ptr` is device memory of this process (never raises)."""
    if not available():
        return False
    try:
        device_range(ptr)
    except (InvalidArgumentError, NotSupportedError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class GpuBuffer:
    """`nbytes` of device memory at `ptr` on GPU `device`. `owner` keeps the object it came from (and
    a DLPack capsule) alive while the buffer is in use."""

    ptr: int
    nbytes: int
    device: int
    read_only: bool = False
    owner: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("ptr", "nbytes", "device"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgumentError(f"GpuBuffer.{name} must be an int, got {value!r}")
        if self.ptr <= 0 or self.nbytes <= 0 or self.device < 0:
            raise InvalidArgumentError(
                "a GPU buffer needs a non-null pointer, a positive size and a device >= 0"
            )

    def piece(self, offset: int, size: int) -> GpuBuffer:
        """The sub-buffer [offset, offset + size)."""
        if offset < 0 or size <= 0 or offset + size > self.nbytes:
            raise InvalidArgumentError(
                f"piece [{offset}, {offset + size}) outside a {self.nbytes}-byte buffer"
            )
        return GpuBuffer(self.ptr + offset, size, self.device, self.read_only, self.owner)


def is_gpu_buffer(obj: Any) -> bool:
    """True for objects `gpu_buffer_of` reads as device memory (checked without touching the driver)."""
    if isinstance(obj, GpuBuffer) or hasattr(obj, "__cuda_array_interface__"):
        return True
    device = getattr(obj, "__dlpack_device__", None)
    if device is None or isinstance(obj, np.ndarray):
        return False
    try:
        return int(device()[0]) in (_KDL_CUDA, _KDL_CUDA_MANAGED)
    except Exception:  # a producer that cannot say where it lives is not a GPU buffer we can read
        return False


def gpu_buffer_of(obj: Any) -> GpuBuffer:
    """A checked GpuBuffer for device memory: the whole of it must lie inside one device allocation of
    this process (a wrong pointer is refused before any copy), and the producer's pending writes have
    landed (its stream waited for). Raises NotSupportedError without a GPU."""
    require()
    stream = None  # the producer's stream to wait for
    if isinstance(obj, GpuBuffer):
        ptr, nbytes, claimed, read_only, owner = obj.ptr, obj.nbytes, obj.device, obj.read_only, obj.owner
    elif hasattr(obj, "__cuda_array_interface__"):
        ptr, nbytes, read_only, stream = _array_interface(obj.__cuda_array_interface__)
        claimed, owner = None, obj
    elif hasattr(obj, "__dlpack_device__"):
        ptr, nbytes, claimed, capsule = _dlpack(obj)
        read_only, owner, stream = False, (obj, capsule), 1
    else:
        raise InvalidArgumentError(f"not a GPU buffer: {type(obj).__name__}")
    base, length, device = device_range(ptr)
    if claimed is not None and device != claimed:
        raise InvalidArgumentError(f"pointer is memory of GPU {device}, not of GPU {claimed}")
    if ptr + nbytes > base + length:
        raise InvalidArgumentError(
            f"[{ptr:#x}, +{nbytes}) runs past its device allocation [{base:#x}, +{length})"
        )
    if stream is not None:
        _core.cuda_synchronize(device, stream)
    return GpuBuffer(ptr, nbytes, device, read_only, owner)


def _contiguous(shape: Sequence[int], strides: Sequence[int] | None, itemsize: int) -> bool:
    """True when `strides` (bytes; None = compact) describe a C-contiguous layout of `shape`."""
    if strides is None:
        return True
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides), strict=True):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _array_interface(cai: Any) -> tuple[int, int, bool, int | None]:
    """(address, bytes, read-only, stream to wait for) of a `__cuda_array_interface__` (version 2 or 3)."""
    try:
        ptr, read_only = cai["data"]
        shape = tuple(int(d) for d in cai["shape"])
        itemsize = int(str(cai["typestr"])[2:])
        strides = cai.get("strides")
        stream = cai.get("stream")
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"malformed __cuda_array_interface__: {exc}") from exc
    if not _contiguous(shape, strides, itemsize):
        raise InvalidArgumentError("GPU buffers must be C-contiguous")
    nbytes = math.prod(shape) * itemsize
    if nbytes == 0:
        raise InvalidArgumentError("empty GPU buffer")
    return int(ptr), nbytes, bool(read_only), None if stream is None else int(stream)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    """DLPack's DLTensor: the first member of the DLManagedTensor an unversioned capsule points to."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_layout(obj: Any, stream: int | None = None) -> tuple[int, int, int, int, Any]:
    """(device type, device id, data address, bytes, capsule) of a DLPack producer's C-contiguous tensor.
    The capsule is not consumed (its destructor frees the tensor): keep it while using the address."""
    try:
        capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
        tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    except (AttributeError, TypeError, ValueError, BufferError) as exc:
        raise InvalidArgumentError(f"cannot read the DLPack tensor: {exc}") from exc
    shape = [tensor.shape[i] for i in range(tensor.ndim)]
    itemsize = tensor.dtype.bits * tensor.dtype.lanes // 8
    strides = None if not tensor.strides else [tensor.strides[i] * itemsize for i in range(tensor.ndim)]
    if itemsize == 0 or not _contiguous(shape, strides, itemsize):
        raise InvalidArgumentError("DLPack tensors must be C-contiguous, of whole bytes")
    address = (tensor.data or 0) + tensor.byte_offset
    return (tensor.device.device_type, tensor.device.device_id, address, math.prod(shape) * itemsize, capsule)


def _dlpack(obj: Any) -> tuple[int, int, int, Any]:
    """(address, bytes, device, capsule) of a DLPack producer on a CUDA device. Stream 1 (the legacy
    default stream) asks the producer to order its pending work before it; the caller waits for it."""
    device_type, _ = (int(x) for x in obj.__dlpack_device__())
    if device_type not in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        raise InvalidArgumentError(f"DLPack device type {device_type} is not a CUDA device")
    _type, device_id, address, nbytes, capsule = dlpack_layout(obj, stream=1)
    if nbytes == 0:
        raise InvalidArgumentError("empty GPU buffer")
    return address, nbytes, device_id, capsule


def copy_to_host(
    device: int, device_ptrs: Sequence[int], host_ptrs: Sequence[int], lengths: Sequence[int]
) -> None:
    """Copies piece i (lengths[i] bytes) from device_ptrs[i] on GPU `device` to host_ptrs[i]: queued on
    one stream, one wait. Every range must have been checked (gpu_buffer_of, registered memory)."""
    copy_between(device, host_ptrs, device_ptrs, lengths)


def copy_to_device(
    device: int, device_ptrs: Sequence[int], host_ptrs: Sequence[int], lengths: Sequence[int]
) -> None:
    """The reverse of copy_to_host."""
    copy_between(device, device_ptrs, host_ptrs, lengths)


def copy_between(device: int, dsts: Sequence[int], srcs: Sequence[int], lengths: Sequence[int]) -> None:
    """Copies piece i from srcs[i] to dsts[i], any of them device or host memory (unified addressing),
    queued on one stream of GPU `device`, one wait. Every range must have been checked."""
    _core.cuda_copy(device, *(np.asarray(c, dtype=np.uint64) for c in (dsts, srcs, lengths)))


class DeviceMemory:
    """A plain device allocation (cuMemAlloc), for benches and tests that need no GPU framework."""

    def __init__(self, nbytes: int, device: int = 0) -> None:
        self.device = device
        self.nbytes = nbytes
        self.ptr = int(_core.cuda_alloc(device, nbytes))

    @property
    def buffer(self) -> GpuBuffer:
        return GpuBuffer(self.ptr, self.nbytes, self.device, owner=self)

    def free(self) -> None:
        if self.ptr:
            _core.cuda_free(self.device, self.ptr)
            self.ptr = 0

    def __enter__(self) -> DeviceMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()
