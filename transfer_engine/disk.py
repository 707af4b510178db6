"""Direct I/O on a disk file or block device, batched at queue depth (io_uring, else a thread pool).

The disk tier's building block: a node keeps objects in one preallocated file opened with O_DIRECT, so
bytes go between registered memory and the device without the page cache. Buffers, offsets and lengths
are multiples of `alignment` (4096 on files).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from transfer_engine import _core
from transfer_engine.units import parse_size

BACKENDS = ("auto", "io_uring", "threads")


class DiskFile:
    """One file (created and preallocated to `size` if needed) or block device, for direct I/O.
    `read_only`: an existing file or device as it is (size 0: all of it), for reads only."""

    def __init__(
        self, path: str, size: int | str, *, backend: str = "auto", depth: int = 32, read_only: bool = False
    ) -> None:
        self._file = _core.DiskFile(str(path), parse_size(size), backend, depth, read_only)

    @property
    def read_only(self) -> bool:
        return bool(self._file.read_only)

    @property
    def path(self) -> str:
        return str(self._file.path)

    @property
    def size(self) -> int:
        return int(self._file.size)

    @property
    def alignment(self) -> int:
        return int(self._file.alignment)

    @property
    def backend(self) -> str:
        """ "io_uring" or "threads": which one runs."""
        return str(self._file.backend)

    def run(
        self,
        writes: Sequence[bool] | np.ndarray,
        addrs: Sequence[int] | np.ndarray,
        offsets: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | np.ndarray,
    ) -> np.ndarray:
        """Runs a batch to the end; per request 0 or a status code (transfer_engine.errors)."""
        return np.asarray(self._file.run(np.asarray(writes, dtype=np.uint8), addrs, offsets, lengths))

    def read(self, addr: int, offset: int, length: int) -> None:
        self._one(False, addr, offset, length)

    def write(self, addr: int, offset: int, length: int) -> None:
        self._one(True, addr, offset, length)

    def _one(self, write: bool, addr: int, offset: int, length: int) -> None:
        """One request; raises (with the cause) unless it completed."""
        self._file.run_one(write, addr, offset, length)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> DiskFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
