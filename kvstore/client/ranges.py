"""Long-lived registrations by address range, each with a payload and an integer tag. A batch's
(address, length) pieces are resolved to their registrations in a few array operations: engines pass
thousands of pieces per batch, and a Python step per piece costs more than the rest of the call."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from transfer_engine.engine import range_tags

_FEW = 4  # pieces looked up one by one rather than as arrays


class RangeTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[int, Any, int]] = {}  # start -> (length, payload, tag)
        # starts (a list, for bisect), starts, ends, tags (arrays, for batches), payloads; by start
        self._sorted: tuple[list[int], np.ndarray, np.ndarray, np.ndarray, list[Any]] | None = None

    def __bool__(self) -> bool:
        return bool(self._entries)

    def add(self, start: int, length: int, payload: Any, tag: int = 0) -> None:
        with self._lock:
            self._entries[start] = (length, payload, tag)
            self._sorted = None

    def pop(self, start: int) -> Any | None:
        """Removes the registration starting at `start`; its payload, or None when there is none."""
        with self._lock:
            entry = self._entries.pop(start, None)
            self._sorted = None
        return None if entry is None else entry[1]

    def _table(self) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray, list[Any]]:
        with self._lock:
            if self._sorted is None:
                starts = sorted(self._entries)
                entries = [self._entries[s] for s in starts]
                self._sorted = (
                    starts,
                    np.array(starts, dtype=np.int64),
                    np.array([s + e[0] for s, e in zip(starts, entries, strict=True)], dtype=np.int64),
                    np.array([e[2] for e in entries], dtype=np.int64),
                    [e[1] for e in entries],
                )
            return self._sorted

    def containing(self, addr: int, length: int) -> tuple[int, Any] | None:
        """(start, payload) of the registration holding [addr, addr + length), or None."""
        starts, _, ends, _, payloads = self._table()
        k = bisect.bisect_right(starts, addr) - 1
        if k < 0 or addr + length > int(ends[k]):
            return None
        return starts[k], payloads[k]

    def tags(
        self, addrs: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray
    ) -> np.ndarray | None:
        """Per piece the tag of the registration holding it; None unless every piece (positive length)
        lies inside one registration."""
        first, starts, ends, tags, _ = self._table()
        if starts.size == 0:
            return None
        if isinstance(addrs, list) and isinstance(lengths, list) and len(addrs) <= _FEW:  # (cheaper so)
            return self._few_tags(first, ends, tags, addrs, lengths)
        try:
            a = np.asarray(addrs, dtype=np.uint64)
            n = np.asarray(lengths, dtype=np.uint64)
        except (OverflowError, TypeError, ValueError):
            return None
        if a.ndim != 1 or a.shape != n.shape:
            return None
        return range_tags(starts, ends, tags, a, n)

    @staticmethod
    def _few_tags(
        starts: list[int], ends: np.ndarray, tags: np.ndarray, addrs: list[int], lengths: Sequence[int]
    ) -> np.ndarray | None:
        found = []
        for a, n in zip(addrs, lengths, strict=True):
            if type(a) is not int or type(n) is not int or n <= 0:
                return None
            k = bisect.bisect_right(starts, a) - 1
            if k < 0 or a + n > int(ends[k]):
                return None
            found.append(k)
        return tags[found]


def split(counts: Sequence[int], column: list[Any]) -> Iterator[list[Any]]:
    """`column` cut into consecutive runs of counts[i] items."""
    begin = 0
    for count in counts:
        yield column[begin : begin + count]
        begin += count
