"""GPU memory as a store buffer: values in device memory move through page-locked host staging.

A put copies each GPU value into staging (one batched device-to-host copy per GPU), checksums it there
and sends it like any host value; a get lands in staging, is verified there, and only then is copied to
the GPU (one batched host-to-device copy). So the checksum covers exactly the bytes stored, and a torn or
corrupt read never reaches device memory: the caller's GPU buffer holds either the value or what it held.

GPU buffers are cupy arrays, torch tensors, DLPack producers, `transfer_engine.cuda.GpuBuffer`, or raw
(address, size) pieces inside a registered GPU allocation (how engines pass their paged KV caches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvstore.client.ranges import RangeTable, split
from kvstore.client.staging import Span, StagingArea
from kvstore.errors import InvalidArgumentError
from transfer_engine import Region, TransferEngine, cuda


@dataclass(slots=True)
class GpuStaged:
    """One value whose buffers are GPU memory: its device pieces and the host block it moves through."""

    devices: list[int]
    gpu_addrs: list[int]
    lengths: list[int]
    size: int
    host: Span | None = field(default=None)  # the host memory it moves through

    def pieces(self, limit: int) -> tuple[list[int], list[int]]:
        assert self.host is not None
        return [self.host.addr], [min(limit, self.size)]

    def clear(self) -> None:
        """Nothing to undo: device memory is written only after a verified read (upload)."""

    def release(self, manager: Any, filled: int = 0) -> None:
        if self.host is not None:
            manager.gpu.staging.release(self.host)
            self.host = None


class GpuMemory:
    """A store client's GPU side: long-lived GPU registrations, and the page-locked staging GPU values
    move through (allocated on first use, so a client that never sees a GPU buffer never pins memory)."""

    def __init__(self, engine: TransferEngine, staging_size: int) -> None:
        self.engine = engine
        self._registered = RangeTable()  # payload: (Region, GpuBuffer); tag: the device
        self.staging = StagingArea(engine, staging_size, 4096, pinned=True, lazy=True)

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
        self._registered.add(buf.ptr, buf.nbytes, (region, buf), tag=buf.device)
        return region

    def unregister(self, buffer: Any) -> bool:
        """Unregisters a GPU registration; False when `buffer` is not one."""
        if not self._registered:
            return False
        if isinstance(buffer, tuple):
            addr = buffer[0]
        elif cuda.is_gpu_buffer(buffer):
            addr = self.buffer_of(buffer).ptr
        else:
            return False
        entry = self._registered.pop(addr)
        if entry is None:
            return False
        self.engine.unregister(entry[0])
        return True

    def holds(self, piece: tuple[Any, ...]) -> bool:
        """A raw (address, size) piece inside a GPU registration."""
        return (
            bool(self._registered)
            and len(piece) == 2
            and all(type(x) is int for x in piece)
            and self._registered.containing(piece[0], piece[1]) is not None
        )

    # -- values -------------------------------------------------------------------------------------------
    def raw_values(self, addrs: list[int], lengths: list[int], counts: list[int]) -> list[GpuStaged] | None:
        """GpuStaged per value when every (address, length) piece lies inside a GPU registration (resolved
        for the whole batch in array operations), else None."""
        if not self._registered:
            return None
        devices = self._registered.tags(addrs, lengths)
        if devices is None:
            return None
        columns = (split(counts, devices.tolist()), split(counts, addrs), split(counts, lengths))
        return [GpuStaged(d, a, n, sum(n)) for d, a, n in zip(*columns, strict=True)]

    def value(self, parts: Sequence[Any], writable: bool) -> GpuStaged:
        """One value given as GPU objects and/or raw pieces of registered GPU memory."""
        devices: list[int] = []
        addrs: list[int] = []
        lengths: list[int] = []
        for part in parts:
            if isinstance(part, tuple):
                hit = self._registered.containing(part[0], part[1]) if self.holds(part) else None
                if hit is None:
                    raise InvalidArgumentError("raw GPU memory must be registered with register_buffer first")
                devices.append(hit[1][1].device)
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

    def stage(self, values: Sequence[GpuStaged]) -> None:
        """Gives each value the host memory it moves through (page-locked staging, else for the call)."""
        for value in values:
            value.host = self.staging.scratch(value.size)

    # -- moves ------------------------------------------------------------------------------------------
    @staticmethod
    def download(values: Sequence[GpuStaged]) -> None:
        """Copies every value's device bytes into its host block: one batched copy per GPU."""
        _move(values, [v.size for v in values], to_device=False)

    @staticmethod
    def upload(values: Sequence[GpuStaged], filled: Sequence[int]) -> None:
        """Copies the first filled[i] bytes of value i's host block to its device memory."""
        _move(values, filled, to_device=True)


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
