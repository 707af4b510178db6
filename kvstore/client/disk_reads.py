"""Reading disk-only objects straight from a node's disk file on this host.

The master names the file and where the object's bytes start in it (a disk-tier kvstore.rpc.messages.Location
with a path) when the reader is on the disk's host. The file is opened read-only with O_DIRECT (nothing of
it is ever written from here); a batch's records are read at queue depth, straight into the caller's
memory when the value is whole pages in one page-aligned piece, else through an aligned scratch area and
one copy (a record's padding never reaches the caller's memory). The caller verifies each value's
checksum: a record freed or reused meanwhile is a mismatch, never bytes.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from kvstore.errors import KVStoreError
from kvstore.rpc.disk_record import PAGE, pages
from kvstore.rpc.messages import Location
from transfer_engine.disk import DiskFile

log = logging.getLogger("kvstore.client")


RETRY_SECONDS = 30.0  # a file that could not be opened here is tried again after this long


class DiskReader:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # the files and the scratch area
        self._files: dict[str, DiskFile] = {}
        self._unreadable: dict[str, float] = {}  # path -> when to try opening it again
        self._scratch: np.ndarray | None = None

    def read(self, items: Sequence[tuple[Sequence[int], Sequence[int], int, Location]]) -> list[bool]:
        """Per item (addrs, lengths of the value's pieces holding its first `size` bytes, size, where):
        True when the record's bytes were read into the pieces (not yet verified)."""
        ok = [False] * len(items)
        with self._lock:
            scratch_bytes = 0
            plan = []  # (item, file, address or None: into scratch at scratch_at)
            for i, (addrs, _lengths, size, where) in enumerate(items):
                f = self._file(where.path)
                if f is None:
                    continue
                direct = len(addrs) == 1 and addrs[0] % PAGE == 0 and size % PAGE == 0
                plan.append((i, f, addrs[0] if direct else None, scratch_bytes))
                if not direct:
                    scratch_bytes += pages(size)
            scratch = self._scratch_of(scratch_bytes)
            by_file: dict[int, list[tuple[int, int]]] = {}  # id(file) -> (plan index, target address)
            for j, (_i, f, target, at) in enumerate(plan):
                by_file.setdefault(id(f), []).append((j, target if target is not None else scratch + at))
            for requests in by_file.values():
                f = plan[requests[0][0]][1]
                offsets = [items[plan[j][0]][3].offset for j, _ in requests]
                sizes = [pages(items[plan[j][0]][2]) for j, _ in requests]
                codes = f.run([False] * len(requests), [a for _, a in requests], offsets, sizes)
                if codes.any():  # the file may have been replaced or shrunk: open it afresh next time
                    self._drop(f)
                for (j, _), code in zip(requests, codes.tolist(), strict=True):
                    i, _f, target, at = plan[j]
                    if code != 0:
                        continue
                    if target is None:  # scatter from scratch into the value's pieces
                        addrs, lengths = items[i][0], items[i][1]
                        for addr, n in zip(addrs, lengths, strict=True):
                            ctypes.memmove(addr, scratch + at, n)
                            at += n
                    ok[i] = True
        return ok

    def _file(self, path: str) -> DiskFile | None:
        f = self._files.get(path)
        if f is not None or self._unreadable.get(path, 0.0) > self._clock():
            return f
        try:
            f = self._files[path] = DiskFile(path, 0, read_only=True, depth=32)
            self._unreadable.pop(path, None)
        except KVStoreError as exc:  # not readable from this process: its node loads instead, for a while
            log.info("disk tier file %s is not readable here (%s); reads go through its node", path, exc)
            self._unreadable[path] = self._clock() + RETRY_SECONDS
        return f

    def _scratch_of(self, nbytes: int) -> int:
        """Address of page-aligned scratch memory of at least `nbytes` (kept, grown as needed)."""
        if nbytes == 0:
            return 0
        if self._scratch is None or self._scratch.nbytes < nbytes:
            self._scratch = np.frombuffer(mmap.mmap(-1, pages(nbytes)), np.uint8)
        return int(self._scratch.ctypes.data)

    def _drop(self, f: DiskFile) -> None:
        """Forgets a file whose reads failed (deleted, replaced): the next read opens it afresh."""
        for path, known in list(self._files.items()):
            if known is f:
                del self._files[path]
        f.close()

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()
