"""Turning caller buffers into registered memory for the engine.

Registered buffers (Store.register_buffer) are used as they are. Others are registered for the
duration of one call (cheap, no copy); a buffer that cannot be registered (it overlaps a registered
one only partly) goes through the staging area with a copy.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvstore.allocator import OffsetAllocator
from kvstore.errors import InvalidArgumentError, NoSpaceError
from transfer_engine import Region, TransferEngine


def as_bytes_view(buffer: Any, writable: bool) -> np.ndarray:
    """A flat uint8 view of a numpy array, bytearray, memoryview, bytes (read-only unless writable), or of
    raw memory given as (address, size) — which the caller must have registered and keep valid."""
    if isinstance(buffer, tuple):
        if len(buffer) != 2 or not all(isinstance(x, int) and x > 0 for x in buffer):
            raise InvalidArgumentError("raw memory is given as (address, size) with positive ints")
        addr, size = buffer
        return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(addr))
    if isinstance(buffer, np.ndarray):
        if not buffer.flags.c_contiguous:
            raise InvalidArgumentError("buffers must be C-contiguous")
        view = buffer if buffer.dtype == np.uint8 and buffer.ndim == 1 else buffer.reshape(-1).view(np.uint8)
    else:
        try:
            view = np.frombuffer(buffer, dtype=np.uint8)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"not a buffer: {type(buffer).__name__}") from exc
    if writable and not view.flags.writeable:
        raise InvalidArgumentError("the destination buffer is read-only")
    return view


def address_of(view: np.ndarray) -> int:
    """Start address of an array (cheaper than .ctypes.data)."""
    return int(view.__array_interface__["data"][0])


@dataclass
class Span:
    """Registered memory standing for one caller buffer during a call."""

    addr: int
    length: int
    view: np.ndarray  # the caller's bytes
    staged: np.ndarray | None = None  # staging copy, when the caller's memory is not registered
    staging_offset: int | None = None
    temporary: Region | None = None


class BufferManager:
    def __init__(self, engine: TransferEngine, staging_size: int) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._regions: dict[int, Region] = {}
        self._raw_views: dict[int, np.ndarray] = {}  # raw (address, size) registrations: one view each
        self.staging = engine.allocate(staging_size, export=False)
        self._staging_alloc = OffsetAllocator(staging_size, 64)

    # -- long-lived registrations ---------------------------------------------------------------------
    def register(self, buffer: Any) -> Region:
        raw = None
        if isinstance(buffer, tuple):
            raw = as_bytes_view(buffer, writable=False)
            region = self.engine.register_ptr(address_of(raw), raw.nbytes, export=False)
        else:
            region = self.engine.register(buffer, export=False)
        with self._lock:
            bisect.insort(self._bases, region.addr)
            self._regions[region.addr] = region
            if raw is not None:
                self._raw_views[region.addr] = raw
        return region

    def unregister(self, buffer: Any) -> None:
        addr = address_of(as_bytes_view(buffer, writable=False))
        with self._lock:
            region = self._regions.pop(addr, None)
            if region is None:
                raise InvalidArgumentError("buffer is not registered")
            self._bases.remove(addr)
            self._raw_views.pop(addr, None)
        self.engine.unregister(region)

    def _registered(self, addr: int, length: int) -> bool:
        with self._lock:
            i = bisect.bisect_right(self._bases, addr) - 1
            if i < 0:
                return False
            region = self._regions[self._bases[i]]
            return addr + length <= region.addr + region.length

    def _raw_span(self, addr: int, size: int) -> Span | None:
        """Raw memory inside a raw registration: a slice of that registration's one view (building a
        ctypes view per piece costs microseconds, and engines pass thousands of pieces per batch)."""
        with self._lock:
            i = bisect.bisect_right(self._bases, addr) - 1
            if i < 0:
                return None
            base = self._bases[i]
            whole = self._raw_views.get(base)
        if whole is None or addr + size > base + whole.nbytes:
            return None
        return Span(addr, size, whole[addr - base : addr - base + size])

    # -- per call ---------------------------------------------------------------------------------------
    def span(self, buffer: Any, writable: bool) -> Span:
        if isinstance(buffer, tuple) and len(buffer) == 2 and all(type(x) is int and x > 0 for x in buffer):
            fast = self._raw_span(*buffer)
            if fast is not None:
                return fast
        view = as_bytes_view(buffer, writable)
        if view.nbytes == 0:
            raise InvalidArgumentError("empty buffer")
        addr = address_of(view)
        if self._registered(addr, view.nbytes):
            return Span(addr, view.nbytes, view)
        if isinstance(buffer, tuple):
            raise InvalidArgumentError(
                "raw (address, size) memory must be registered with register_buffer first"
            )
        try:
            region = self.engine.register(view, export=False)
            return Span(addr, view.nbytes, view, temporary=region)
        except InvalidArgumentError:
            return self.stage(view, copy_in=not writable)

    def _staging_block(self, size: int) -> tuple[int, np.ndarray] | None:
        """(offset, view) of `size` free bytes of the pre-faulted staging area, or None when full."""
        with self._lock:
            offset = self._staging_alloc.allocate(size)
        if offset is None:
            return None
        assert self.staging.array is not None
        return offset, self.staging.array[offset : offset + size]

    def stage(self, view: np.ndarray, copy_in: bool) -> Span:
        block = self._staging_block(view.nbytes)
        if block is None:
            raise NoSpaceError(f"staging area cannot hold {view.nbytes} bytes; register the buffer instead")
        offset, staged = block
        if copy_in:
            staged[:] = view
        return Span(self.staging.addr + offset, view.nbytes, view, staged=staged, staging_offset=offset)

    def scratch(self, size: int) -> Span:
        """Registered memory of `size` bytes to read into: staging, or a fresh buffer when it is full."""
        block = self._staging_block(size)
        if block is not None:  # the staged bytes are the result itself: nothing to copy out
            offset, staged = block
            return Span(self.staging.addr + offset, size, staged, staged=staged, staging_offset=offset)
        view = np.empty(size, dtype=np.uint8)
        return Span(address_of(view), size, view, temporary=self.engine.register(view, export=False))

    def release(self, span: Span, copy_out: bool = False, length: int = 0) -> None:
        """Ends a span; copy_out moves `length` staged bytes into the caller's buffer first."""
        if span.staged is not None and span.staging_offset is not None:
            if copy_out:
                span.view[:length] = span.staged[:length]
            with self._lock:
                self._staging_alloc.free(span.staging_offset)
        if span.temporary is not None:
            self.engine.unregister(span.temporary)

    def close(self) -> None:
        self._regions.clear()
        self._bases.clear()
