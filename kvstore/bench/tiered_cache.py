"""A simulated two-tier block cache (memory over disk), as storage nodes with a disk tier run it.

A new block goes to memory. When memory is full its eviction victim is demoted to disk instead of dropped
(while the disk has room for it after its own eviction); the disk evicts by the same policy. A block read
from disk stays there on a first read and is promoted back to memory on a second read within
`promote_window` seconds (trace time), so one-off reads do not push the hot set out of memory.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore.bench.trace import leading_run
from kvstore.errors import InvalidArgumentError
from kvstore.master.planners.eviction import EvictionPolicy, make_policy


class _Tier:
    def __init__(self, policy: str, capacity: int) -> None:
        self.policy: EvictionPolicy = make_policy(policy)
        self.capacity = capacity
        self.present: set[str] = set()

    def add(self, key: str) -> None:
        self.present.add(key)
        self.policy.on_insert(key, 1)

    def remove(self, key: str) -> None:
        self.present.discard(key)
        self.policy.on_remove(key)

    def victim(self) -> str | None:
        """The policy's first candidate while over capacity, else None."""
        if len(self.present) <= self.capacity:
            return None
        return next(self.policy.candidates())


class TieredCache:
    """Memory and disk tiers of fixed capacities (blocks), each ordered by a master eviction policy."""

    def __init__(
        self, policy: str, memory_capacity: int, disk_capacity: int, promote_window: float = 600.0
    ) -> None:
        if memory_capacity <= 0 or disk_capacity < 0:
            raise InvalidArgumentError("the memory tier needs a positive capacity, the disk tier >= 0")
        if promote_window < 0:
            raise InvalidArgumentError("promote_window must not be negative")
        self.memory = _Tier(policy, memory_capacity)
        self.disk = _Tier(policy, disk_capacity)
        self.promote_window = promote_window
        self._disk_read: dict[str, float] = {}  # disk block -> time of its last read while on disk
        self.memory_hits = 0
        self.disk_hits = 0
        self.demotions = 0
        self.promotions = 0
        self.evictions = 0  # blocks dropped from the cache altogether

    def _in_cache(self) -> _Union:
        return _Union(self.memory.present, self.disk.present)

    def prefix(self, keys: Sequence[str]) -> int:
        return leading_run(keys, self._in_cache())

    def admit(self, keys: Sequence[str], hits: int, now: float = 0.0) -> None:
        """A request for `keys` whose leading `hits` blocks were served from the cache."""
        for i, key in enumerate(keys):
            if key in self.memory.present:
                self.memory_hits += i < hits
                self.memory.policy.on_access(key)
            elif key in self.disk.present:
                self.disk_hits += i < hits
                last = self._disk_read.get(key)
                if last is not None and now - last <= self.promote_window:
                    self._promote(key)
                else:
                    self._disk_read[key] = now
                    self.disk.policy.on_access(key)
            else:
                self.memory.add(key)
            self._settle()

    def _promote(self, key: str) -> None:
        self.disk.remove(key)
        self._disk_read.pop(key, None)
        self.memory.add(key)
        self.promotions += 1

    def _settle(self) -> None:
        """Demotes memory victims to disk, and drops disk victims, until both tiers fit."""
        while (victim := self.memory.victim()) is not None:
            self.memory.remove(victim)
            if self.disk.capacity:
                self.disk.add(victim)
                self.demotions += 1
            else:
                self.evictions += 1
        while (victim := self.disk.victim()) is not None:
            self.disk.remove(victim)
            self._disk_read.pop(victim, None)
            self.evictions += 1


class _Union:
    """Membership in either of two sets, without building their union."""

    def __init__(self, a: set[str], b: set[str]) -> None:
        self.a, self.b = a, b

    def __contains__(self, key: object) -> bool:
        return key in self.a or key in self.b
