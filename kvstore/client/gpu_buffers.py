"""GPU memory as a store buffer: values in device memory move through page-locked host staging.

A put copies each GPU value into staging (one batched device-to-host copy per GPU), checksums it there
and sends it like any host value; a get lands in staging, is verified there, and only then is copied to
the GPU (one batched host-to-device copy). So the checksum covers exactly the bytes stored, and a torn or
corrupt read never reaches device memory: the caller's GPU buffer holds either the value or what it held.

GPU buffers are cupy arrays, torch tensors, DLPack producers, `transfer_engine.cuda.GpuBuffer`, or raw
(address, size) pieces inside a registered GPU allocation (how engines pass their paged KV caches).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvstore.allocator import OffsetAllocator
from kvstore.errors import InvalidArgumentError, KVStoreError
from transfer_engine import Region, TransferEngine, cuda

log = logging.getLogger("kvstore.client")


@dataclass(slots=True)
class HostBlock:
    """Host memory standing for one GPU value during a call: a block of the staging area, or (when that
    is full) a buffer registered for the call."""

    addr: int
    view: np.ndarray
    staging_offset: int | None = None
    temporary: Region | None = None


@dataclass(slots=True)
class GpuStaged:
    """One value whose buffers are GPU memory: its device pieces and the host block it moves through."""

    devices: list[int]
    gpu_addrs: list[int]
    lengths: list[int]
    size: int
    host: HostBlock | None = field(default=None)

    def pieces(self, limit: int) -> tuple[list[int], list[int]]:
        assert self.host is not None
        return [self.host.addr], [min(limit, self.size)]

    def clear(self) -> None:
        """Nothing to undo: device memory is written only after a verified read (upload)."""

    def release(self, manager: Any, filled: int = 0) -> None:
        if self.host is not None:
            manager.gpu.release(self.host)
            self.host = None


class GpuMemory:
    """A store client's GPU side: long-lived GPU registrations, and the page-locked staging GPU values
    move through (allocated on first use, so a client that never sees a GPU buffer never pins memory)."""

    def __init__(self, engine: TransferEngine, staging_size: int) -> None:
        self.engine = engine
        self.staging_size = staging_size
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._regions: dict[int, tuple[Region, cuda.GpuBuffer]] = {}
        self._table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._staging: Region | None = None
        self._staging_alloc: OffsetAllocator | None = None

    # -- registrations ----------------------------------------------------------------------------------
    @staticmethod
    def is_gpu(buffer: Any) -> bool:
        """A GPU object, or a raw (address, size) pointer into device memory (only asked of the driver
        when one is loaded)."""
        if isinstance(buffer, tuple):
            return len(buffer) == 2 and isinstance(buffer[0], int) and cuda.is_device_pointer(buffer[0])
        return cuda.is_gpu_buffer(buffer)

    @staticmethod
    def buffer_of(buffer: Any) -> cuda.GpuBuffer:
        if isinstance(buffer, tuple):
            addr, size = buffer
            return cuda.gpu_buffer_of(cuda.GpuBuffer(addr, size, cuda.device_range(addr)[2]))
        return cuda.gpu_buffer_of(buffer)

    def register(self, buffer: Any) -> Region:
        buf = self.buffer_of(buffer)
        region = self.engine.register_ptr(buf.ptr, buf.nbytes, kind=f"gpu:{buf.device}", export=False)
        with self._lock:
            bisect.insort(self._bases, buf.ptr)
            self._regions[buf.ptr] = (region, buf)
            self._table = None
        return region

    def unregister(self, buffer: Any) -> bool:
        """Unregisters a GPU registration; False when `buffer` is not one."""
        addr = buffer[0] if isinstance(buffer, tuple) else self.buffer_of(buffer).ptr
        with self._lock:
            entry = self._regions.pop(addr, None)
            if entry is None:
                return False
            self._bases.remove(addr)
            self._table = None
        self.engine.unregister(entry[0])
        return True

    def registered(self) -> bool:
        return bool(self._regions)

    def _lookup(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts, ends, devices) of the registrations, sorted."""
        with self._lock:
            if self._table is None:
                bufs = [self._regions[b][1] for b in self._bases]
                self._table = (
                    np.array([b.ptr for b in bufs], dtype=np.int64),
                    np.array([b.ptr + b.nbytes for b in bufs], dtype=np.int64),
                    np.array([b.device for b in bufs], dtype=np.int64),
                )
            return self._table

    # -- values -------------------------------------------------------------------------------------------
    def raw_values(self, addrs: list[int], lengths: list[int], counts: list[int]) -> list[GpuStaged] | None:
        """GpuStaged per value when every (address, length) piece lies inside a GPU registration (resolved
        for the whole batch in array operations), else None."""
        starts, ends, devices = self._lookup()
        if starts.size == 0:
            return None
        try:
            a = np.array(addrs, dtype=np.int64)
            n = np.array(lengths, dtype=np.int64)
        except (OverflowError, TypeError, ValueError):
            return None
        at = np.searchsorted(starts, a, side="right") - 1
        if (n <= 0).any() or (at < 0).any() or (a + n > ends[at]).any():
            return None
        piece_devices = devices[at].tolist()
        out: list[GpuStaged] = []
        begin = 0
        for count in counts:
            end = begin + count
            size = sum(lengths[begin:end])
            out.append(GpuStaged(piece_devices[begin:end], addrs[begin:end], lengths[begin:end], size))
            begin = end
        return out

    def value(self, parts: Sequence[Any], writable: bool) -> GpuStaged:
        """One value given as GPU objects and/or raw pieces of registered GPU memory."""
        devices: list[int] = []
        addrs: list[int] = []
        lengths: list[int] = []
        for part in parts:
            if isinstance(part, tuple):
                ok = len(part) == 2 and all(type(x) is int for x in part)
                resolved = self.raw_values([part[0]], [part[1]], [1]) if ok else None
                if resolved is None:
                    raise InvalidArgumentError("raw GPU memory must be registered with register_buffer first")
                devices += resolved[0].devices
                addrs.append(part[0])
                lengths.append(part[1])
                continue
            if not cuda.is_gpu_buffer(part):
                raise InvalidArgumentError("a value's buffers must be all host memory or all GPU memory")
            buf = cuda.gpu_buffer_of(part)
            if writable and buf.read_only:
                raise InvalidArgumentError("the destination GPU buffer is read-only")
            devices.append(buf.device)
            addrs.append(buf.ptr)
            lengths.append(buf.nbytes)
        if not lengths:
            raise InvalidArgumentError("empty buffer list")
        return GpuStaged(devices, addrs, lengths, sum(lengths))

    # -- staging --------------------------------------------------------------------------------------------
    def stage(self, values: Sequence[GpuStaged]) -> None:
        """Gives each value its host block."""
        for value in values:
            value.host = self._host_block(value.size)

    def _host_block(self, size: int) -> HostBlock:
        with self._lock:
            if self._staging is None:
                self._staging = self._allocate_staging()
                self._staging_alloc = OffsetAllocator(self.staging_size, 4096)
            assert self._staging_alloc is not None
            offset = self._staging_alloc.allocate(size)
        if offset is not None:
            assert self._staging.array is not None
            return HostBlock(self._staging.addr + offset, self._staging.array[offset : offset + size], offset)
        view = np.empty(size, dtype=np.uint8)  # staging is full: pageable memory for this call
        region = self.engine.register(view, export=False)
        return HostBlock(region.addr, view, temporary=region)

    def _allocate_staging(self) -> Region:
        try:
            return self.engine.allocate(self.staging_size, export=False, pinned=True)
        except KVStoreError as exc:  # e.g. RLIMIT_MEMLOCK: still correct, the driver stages itself
            log.warning("GPU staging could not be page-locked (%s); using pageable memory", exc)
            return self.engine.allocate(self.staging_size, export=False)

    def release(self, block: HostBlock) -> None:
        if block.staging_offset is not None:
            with self._lock:
                assert self._staging_alloc is not None
                self._staging_alloc.free(block.staging_offset)
        if block.temporary is not None:
            self.engine.unregister(block.temporary)

    # -- moves ------------------------------------------------------------------------------------------
    @staticmethod
    def download(values: Sequence[GpuStaged]) -> None:
        """Copies every value's device bytes into its host block: one batched copy per GPU."""
        _move(values, [v.size for v in values], to_device=False)

    @staticmethod
    def upload(values: Sequence[GpuStaged], filled: Sequence[int]) -> None:
        """Copies the first filled[i] bytes of value i's host block to its device memory."""
        _move(values, filled, to_device=True)

    def close(self) -> None:
        with self._lock:
            self._regions.clear()
            self._bases.clear()
            self._table = None


def _move(values: Sequence[GpuStaged], limits: Sequence[int], to_device: bool) -> None:
    by_device: dict[int, tuple[list[int], list[int], list[int]]] = {}
    for value, limit in zip(values, limits, strict=True):
        assert value.host is not None
        host = value.host.addr
        for device, addr, length in zip(value.devices, value.gpu_addrs, value.lengths, strict=True):
            n = min(length, limit)
            if n <= 0:
                break
            gpu_ptrs, host_ptrs, sizes = by_device.setdefault(device, ([], [], []))
            gpu_ptrs.append(addr)
            host_ptrs.append(host)
            sizes.append(n)
            host += n
            limit -= n
    for device, (gpu_ptrs, host_ptrs, sizes) in by_device.items():
        if to_device:
            cuda.copy_to_device(device, gpu_ptrs, host_ptrs, sizes)
        else:
            cuda.copy_to_host(device, gpu_ptrs, host_ptrs, sizes)
