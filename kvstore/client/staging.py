"""Registered memory a client call stands in for the caller's: a pre-faulted staging area handed out in
blocks (one allocator), with a buffer registered for the call when the area is full. One for buffers that
cannot be registered, one (page-locked, page-aligned, made on first use) for GPU values."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np

from kvstore.allocator import OffsetAllocator
from kvstore.errors import KVStoreError
from transfer_engine import Region, TransferEngine

log = logging.getLogger("kvstore.client")


@dataclass(slots=True)
class Span:
    """Registered memory standing for one caller buffer during a call."""

    addr: int
    length: int
    view: np.ndarray  # the caller's bytes
    staged: np.ndarray | None = None  # staging copy, when the caller's memory is not registered
    staging_offset: int | None = None
    temporary: Region | None = None


class StagingArea:
    def __init__(
        self, engine: TransferEngine, size: int, alignment: int, *, pinned: bool = False, lazy: bool = False
    ) -> None:
        self.engine = engine
        self.size = size
        self.alignment = alignment
        self.pinned = pinned
        self._lock = threading.Lock()
        self._region: Region | None = None
        self._alloc: OffsetAllocator | None = None
        if not lazy:
            self._area()

    @property
    def allocated(self) -> bool:
        """False until a lazy area is first used (a client that never staged a GPU value)."""
        return self._region is not None

    def _area(self) -> tuple[Region, OffsetAllocator]:
        """The area (allocated on first use when lazy); the caller holds the lock or is __init__."""
        if self._region is None or self._alloc is None:
            self._region = self._allocate()
            self._alloc = OffsetAllocator(self.size, self.alignment)
        return self._region, self._alloc

    def _allocate(self) -> Region:
        if self.pinned:
            try:
                return self.engine.allocate(self.size, export=False, pinned=True)
            except KVStoreError as exc:  # e.g. RLIMIT_MEMLOCK: still correct, only slower
                log.warning("staging could not be page-locked (%s); using pageable memory", exc)
        return self.engine.allocate(self.size, export=False)

    def take(self, size: int) -> Span | None:
        """`size` bytes of the area as a Span whose bytes are the staging itself; None when full."""
        with self._lock:
            region, alloc = self._area()
            offset = alloc.allocate(size)
        if offset is None:
            return None
        assert region.array is not None
        staged = region.array[offset : offset + size]
        return Span(region.addr + offset, size, staged, staged=staged, staging_offset=offset)

    def scratch(self, size: int) -> Span:
        """Registered memory of `size` bytes: a block of the area, or a buffer registered for the call."""
        block = self.take(size)
        if block is not None:
            return block
        view = np.empty(size, dtype=np.uint8)
        region = self.engine.register(view, export=False)
        return Span(region.addr, size, view, temporary=region)

    def release(self, span: Span) -> None:
        """Gives a span's block back to the area (or unregisters its temporary buffer)."""
        if span.staging_offset is not None:
            with self._lock:
                assert self._alloc is not None
                self._alloc.free(span.staging_offset)
        if span.temporary is not None:
            self.engine.unregister(span.temporary)
