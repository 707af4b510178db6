"""Replica locations the master leased to this client, reused without asking again.

While an object's read lease lasts the master will neither evict nor (unless forced) remove it, so
where its replicas live cannot change: a repeated read of the same key within half the lease skips the
metadata round trip. The bytes are still checksummed on every read, so a forced removal in between is
a miss (and a fresh lookup), never wrong bytes. Reads served this way are reported to the master with
the next heartbeat, so eviction order and replication heat still see them.

Every operation costs O(1) per key (amortized), however many leases the cache has held: entries are in fill
order in an OrderedDict, whose head pops in O(1) (a plain dict whose head is popped keeps dead slots
that every later `iter` walks again: past 65,536 leases a 1,000-key fill grew from 0.3 ms to 48 ms).
Expired entries go lazily, never in one sweep: a lookup drops those it meets, a fill drops a few from
the head for each key it adds, and each heartbeat's `take_touches` drops a bounded number more.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

from kvstore.config import StoreConfig
from kvstore.errors import InvalidArgumentError

# One default, the client's setting's (StoreConfig.lease_cache_entries, KVSTORE_LEASE_CACHE_ENTRIES).
DEFAULT_MAX_ENTRIES = cast(
    int, next(f.default for f in dataclasses.fields(StoreConfig) if f.name == "lease_cache_entries")
)

# Expired entries a fill drops from the head per key it adds: more than one, so a cache that stopped
# being read still drains as it fills, and a bounded cost per key on the hot path.
EXPIRED_DROPS_PER_FILLED_KEY = 2
# Expired entries each heartbeat drops (take_touches): an idle client's cache empties in a few beats.
EXPIRED_DROPS_PER_HEARTBEAT = 4096


class LeaseCache:
    """Located entries per key until half their read lease has passed; at most `max_entries`, the
    oldest fill evicted first. The bound is per Store: a client of S shards (kvstore.client.sharded)
    holds a cache per shard, so up to S x `max_entries` in all."""

    def __init__(
        self,
        lease_ttl: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not lease_ttl > 0:
            raise InvalidArgumentError(f"lease_ttl must be positive seconds, got {lease_ttl!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidArgumentError(f"max_entries must be a positive integer, got {max_entries!r}")
        self.validity = lease_ttl / 2  # margin for clock drift and the RPC's own latency
        self.max_entries = max_entries
        self._clock = clock  # the clock of `granted_at` (time.monotonic, as the locator's)
        # key -> (expiry, entry), oldest fill first; a refilled key moves to the end
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._touched: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Entries held, expired ones not yet dropped included."""
        with self._lock:
            return len(self._entries)

    def lookup(self, keys: Sequence[str]) -> list[Any]:
        """The cached [size, checksum, replicas] per key, or None where none is valid."""
        now = self._clock()
        out: list[Any] = []
        entries = self._entries
        get = entries.get  # bound once: an OrderedDict's attribute lookup costs more than a dict's
        with self._lock:
            for key in keys:
                entry = get(key)
                if entry is None:
                    out.append(None)
                elif entry[0] > now:
                    out.append(entry[1])
                else:
                    del entries[key]  # expired: gone now that a read met it
                    out.append(None)
        return out

    def served(self, keys: Sequence[str]) -> None:
        """Keys read from cached locations: reported with the next heartbeat."""
        with self._lock:
            self._touched.update(keys)

    def fill(self, keys: Sequence[str], found: Sequence[Any], granted_at: float) -> None:
        """Caches what the master found per key (None: absent, so any entry is dropped), leased at
        `granted_at` (the clock's time just before the request)."""
        expiry = granted_at + self.validity
        now = self._clock()
        entries = self._entries
        lapsed = expiry <= now  # the reply came after half the lease: nothing to reuse
        pop, limit = entries.pop, self.max_entries
        with self._lock:
            self._drop_expired(now, EXPIRED_DROPS_PER_FILLED_KEY * len(keys))
            for key, entry in zip(keys, found, strict=True):
                held = pop(key, None)  # a refill moves to the end: its lease is the newest
                if entry is None or lapsed:
                    continue
                if held is None and len(entries) >= limit:
                    entries.popitem(last=False)
                entries[key] = (expiry, entry)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def drop(self, keys: Sequence[str]) -> None:
        with self._lock:
            for key in keys:
                self._entries.pop(key, None)

    def drop_expired(self, limit: int) -> int:
        """Drops up to `limit` expired entries from the oldest fills; returns how many went."""
        now = self._clock()
        with self._lock:
            return self._drop_expired(now, limit)

    def take_touches(self, limit: int = 4096) -> list[str]:
        """Keys read from the cache since the last call (for the master's access statistics).
        The heartbeat calls it: it also drops a bounded number of expired entries, so a client that
        stopped reading does not keep its leases' entries forever."""
        now = self._clock()
        with self._lock:
            keys = [k for k, _ in self._touched.most_common(limit)]
            self._touched.clear()
            self._drop_expired(now, EXPIRED_DROPS_PER_HEARTBEAT)
        return keys

    def _drop_expired(self, now: float, limit: int) -> int:
        """Pops expired entries from the head, at most `limit` (the caller holds the lock). Fills come
        in lease order, so the head expires first; a thread's fill that lands after a later-granted one
        waits a little longer, and a lookup drops it if it comes first."""
        entries = self._entries
        dropped = 0
        while dropped < limit and entries:
            head = next(iter(entries))  # O(1) on an OrderedDict (its own linked list)
            if entries[head][0] > now:
                break
            del entries[head]
            dropped += 1
        return dropped
