"""Replica locations the master leased to this client, reused without asking again.

While an object's read lease lasts the master will neither evict nor (unless forced) remove it, so
where its replicas live cannot change: a repeated read of the same key within half the lease skips the
metadata round trip. The bytes are still checksummed on every read, so a forced removal in between is
a miss (and a fresh lookup), never wrong bytes. Reads served this way are reported to the master with
the next heartbeat, so eviction order and replication heat still see them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any


class LeaseCache:
    def __init__(self, lease_ttl: float, max_entries: int = 1 << 16) -> None:
        self.validity = lease_ttl / 2  # margin for clock drift and the RPC's own latency
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Any]] = {}
        self._touched: Counter[str] = Counter()
        self._lock = threading.Lock()

    def lookup(self, keys: Sequence[str]) -> list[Any]:
        """The cached [size, checksum, replicas] per key, or None where none is valid."""
        now = time.monotonic()
        out: list[Any] = []
        with self._lock:
            for key in keys:
                entry = self._entries.get(key)
                out.append(entry[1] if entry is not None and entry[0] > now else None)
        return out

    def served(self, keys: Sequence[str]) -> None:
        """Keys read from cached locations: reported with the next heartbeat."""
        with self._lock:
            self._touched.update(keys)

    def fill(self, keys: Sequence[str], found: Sequence[Any], granted_at: float) -> None:
        expiry = granted_at + self.validity
        with self._lock:
            for key, entry in zip(keys, found, strict=True):
                if entry is None:
                    self._entries.pop(key, None)
                    continue
                if len(self._entries) >= self.max_entries:
                    self._entries.pop(next(iter(self._entries)))
                self._entries[key] = (expiry, entry)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def drop(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)

    def take_touches(self, limit: int = 4096) -> list[str]:
        """Keys read from the cache since the last call (for the master's access statistics)."""
        with self._lock:
            keys = [k for k, _ in self._touched.most_common(limit)]
            self._touched.clear()
        return keys
