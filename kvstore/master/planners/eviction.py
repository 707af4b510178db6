"""Eviction policies. The master asks a policy for candidates in eviction order and skips the ones
that may not go (leased, pinned, put in progress); a policy only orders keys.

A policy keeps its order in a KeyOrder: the master's is the object table's (kvstore.master.ledger.objects.
TableOrder: links through the rows, nothing per key in Python); simulators and tests use a DictOrder.
"""

from __future__ import annotations

import itertools
import math
import secrets
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator
from typing import Protocol

from kvstore._meta import HashOrder


class KeyOrder(Protocol):
    """An ordered set of keys, first to evict first."""

    # The object table's order number when this is one of the table's orders (links through its rows: a
    # reader's lookup in the table can move its hits in the same pass); None otherwise.
    table_order: int | None

    def add(self, key: str, front: bool = False) -> None:
        """Puts the key last (or first), moving it if present."""

    def touch(self, key: str) -> bool:
        """Moves the key last if present; False if absent."""

    def add_many(self, keys: list[str], front: bool = False) -> None:
        """add() of each key, in order."""

    def touch_many(self, keys: list[str]) -> list[bool]:
        """touch() of each key, in order."""

    def discard(self, key: str) -> bool:
        """Removes the key; False if absent."""

    def discard_many(self, keys: list[str]) -> list[str]:
        """discard() of each key; the keys that were present."""

    def __contains__(self, key: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def __len__(self) -> int: ...


class DictOrder:
    """A KeyOrder in an OrderedDict (standalone policies: simulators, tests)."""

    table_order: int | None = None

    def __init__(self) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str, front: bool = False) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key, last=not front)

    def add_many(self, keys: list[str], front: bool = False) -> None:
        for key in keys:
            self.add(key, front)

    def touch(self, key: str) -> bool:
        if key not in self._keys:
            return False
        self._keys.move_to_end(key)
        return True

    def touch_many(self, keys: list[str]) -> list[bool]:
        return [self.touch(key) for key in keys]

    def discard(self, key: str) -> bool:
        return self._keys.pop(key, 0) is None

    def discard_many(self, keys: list[str]) -> list[str]:
        return [key for key in keys if self.discard(key)]

    def pop_first(self) -> str:
        return self._keys.popitem(last=False)[0]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class EvictionPolicy(ABC):
    """Orders evictable keys. Called on every insert, access and removal of a visible object."""

    name = "base"

    @abstractmethod
    def on_insert(self, key: str, size: int) -> None: ...

    def on_insert_many(self, keys: list[str]) -> None:
        """on_insert of each key, in order (the put path's: one call per batch)."""
        for key in keys:
            self.on_insert(key, 0)

    def insert_last(self) -> tuple[int, int] | None:
        """How the put path's commit in the object table (Ledger.end_puts) does on_insert_many's work in
        its own pass, where this policy's order is the table's and a batch inserted now only goes last
        in it: (that order's number, n: the commit names back the keys whose CRC-32 is divisible by n,
        for on_inserted; 0: none). None: the caller gives on_insert_many every key."""
        return None

    def on_inserted(self, sampled: list[str]) -> None:
        """A commit linked its keys last in this policy's order (insert_last); `sampled`: those it names."""
        raise NotImplementedError(f"{self.name} reads no inserts from the table")

    @abstractmethod
    def on_access(self, key: str) -> None: ...

    def on_access_many(self, keys: list[str]) -> None:
        """on_access of each key, in order (the read path's: one call per batch)."""
        for key in keys:
            self.on_access(key)

    def read_touch(self) -> tuple[int, int] | None:
        """How a reader's lookup in the object table does on_access_many's work in its own pass, where
        this policy's order is the table's: (that order's number, n: the lookup names back the hits it
        moved whose key's CRC-32 is divisible by n, for on_touched; 0: none). None: the caller gives
        on_access_many every hit."""
        return None

    def on_touched(self, sampled: list[str]) -> None:
        """A lookup moved its hits last in this policy's order (read_touch); `sampled`: those it names."""
        raise NotImplementedError(f"{self.name} reads no touches from the table")

    @abstractmethod
    def on_remove(self, key: str) -> None: ...

    def on_remove_many(self, keys: list[str]) -> None:
        """on_remove of each key (a lost segment's objects: one call for thousands)."""
        for key in keys:
            self.on_remove(key)

    @abstractmethod
    def candidates(self) -> Iterator[str]:
        """Keys, first to evict first. The caller stops iterating before it removes anything."""

    @abstractmethod
    def __len__(self) -> int: ...


class LRUPolicy(EvictionPolicy):
    """Least recently used first."""

    name = "lru"

    def __init__(self, order: KeyOrder | None = None) -> None:
        self._order = order if order is not None else DictOrder()

    def on_insert(self, key: str, size: int) -> None:
        self._order.add(key)

    def on_insert_many(self, keys: list[str]) -> None:
        self._order.add_many(keys)

    def insert_last(self) -> tuple[int, int] | None:
        order = self._order.table_order
        return None if order is None else (order, 0)  # (LRU samples nothing)

    def on_inserted(self, sampled: list[str]) -> None:
        pass

    def on_access(self, key: str) -> None:
        self._order.touch(key)

    def on_access_many(self, keys: list[str]) -> None:
        self._order.touch_many(keys)

    def read_touch(self) -> tuple[int, int] | None:
        order = self._order.table_order
        return None if order is None else (order, 0)  # (LRU samples nothing)

    def on_touched(self, sampled: list[str]) -> None:
        pass

    def on_remove(self, key: str) -> None:
        self._order.discard(key)

    def on_remove_many(self, keys: list[str]) -> None:
        self._order.discard_many(keys)

    def candidates(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


class _Shadow:
    """A key-only LRU cache of a sample of the key space, replaying one insertion rule (its keys and its
    ghost's kept as hashes in C++: a shadow of a 10M-object cache holds 1.25M keys)."""

    def __init__(self, bimodal: bool, seed: int) -> None:
        self.bimodal = bimodal
        self.order = HashOrder(seed)
        self.ghost = HashOrder(seed)  # (the same seed: a hash popped from order is the key's in ghost)
        self.hits = 0.0

    def reference_many(self, keys: list[str], capacity: int, decay: float) -> None:
        """Each key referenced in turn, the hits decayed before each: a hit moves it last, a miss inserts
        it (_insert's rule) and evicts past `capacity` into the ghost (_trim's bound), in one crossing."""
        self.hits = self.order.replay_shadow(self.ghost, keys, capacity, self.bimodal, decay, self.hits)


def _insert(order: KeyOrder | HashOrder, ghost: HashOrder, key: str, bimodal: bool) -> None:
    """LRU insertion puts a new key at the MRU end. Bimodal insertion puts it at the LRU end (first to
    go unless used again) except keys evicted recently (in the ghost list): a flood of one-off keys then
    cannot push out the keys that are being reused, and a key seen twice within the ghost's reach is
    admitted. The rule is coherent along a prefix chain (a returning conversation's blocks were evicted
    together), so sampled shadow hits predict the real cache's prefix hits. (DIP's "every 32nd new key
    at the MRU end" keeps scattered blocks, useless without their prefix: counted as shadow hits they
    made the duel favour bimodal insertion where it lost.)"""
    if not bimodal or ghost.discard(key):
        order.add(key)
    else:
        order.add(key, front=True)


def _trim(ghost: HashOrder, capacity: int) -> None:
    """A ghost remembers the last 4 x capacity keys evicted."""
    ghost.trim(4 * max(capacity, 1))  # (one crossing: a removal of 100k keys popped 100k one by one)


class AdaptivePolicy(EvictionPolicy):
    """LRU order with an adaptive insertion rule (set dueling, after Qureshi et al.'s DIP).

    Two shadow caches replay a 1/`sample` sample of the references, one inserting new keys like LRU,
    one with bimodal insertion plus a ghost list; the real cache inserts the way the shadow with more
    (decayed) hits does. Small caches facing many one-off keys get scan resistance; large caches, where
    recency wins, stay LRU. Hits always move a key to the MRU end.

    Switching back and forth costs hits (a short bimodal spell drops fresh chains without keeping
    others long enough to pay back), so the duel starts only once the cache is full and bimodal must
    lead by `confidence` standard deviations of the hit counts; `decay` sets the window
    (~1/(1-decay) sampled references).
    """

    name = "adaptive"

    def __init__(
        self,
        sample: int = 8,
        decay: float = 0.99997,
        confidence: float = 3.0,
        order: KeyOrder | None = None,
    ) -> None:
        self._confidence = confidence
        self._order = order if order is not None else DictOrder()
        seed = secrets.randbits(64)  # (keys a client chooses cannot collide on purpose in a ghost)
        self._ghost = HashOrder(seed)
        self._sample = sample
        self._decay = decay
        self._shadows = (_Shadow(False, seed), _Shadow(True, seed))
        self._full = False

    @property
    def bimodal(self) -> bool:
        """True while bimodal insertion is clearly winning; LRU is the safe default. Before the first
        eviction the shadows model a cache as small as the one filling up, where bimodal insertion wins
        for the wrong reason; after it, the lead must stand out of the counting noise (the difference
        of two Poisson counts)."""
        lru, bip = self._shadows
        lead = bip.hits - lru.hits
        return self._full and lead > self._confidence * math.sqrt(bip.hits + lru.hits)

    def _reference_many(self, keys: list[str]) -> None:
        """References of sampled keys (HashOrder.sampled picks them) replayed in both shadows, in order
        (the shadows are independent: each replays the batch at once)."""
        if not keys:
            return
        capacity = max(1, len(self._order) // self._sample)
        for shadow in self._shadows:
            shadow.reference_many(keys, capacity, self._decay)

    def on_insert(self, key: str, size: int) -> None:
        self._reference_many(self._ghost.sampled([key], self._sample))
        _insert(self._order, self._ghost, key, self.bimodal)

    def on_insert_many(self, keys: list[str]) -> None:
        """The insertion rule is read once for the batch; the shadows then replay its sampled keys at
        the cache's size with the batch in it (replayed first, from an empty cache, a batch would find
        shadows of one key)."""
        if not self.bimodal:  # LRU insertion, the usual state: every key last, in one call
            self._order.add_many(keys)
        else:
            for key in keys:
                _insert(self._order, self._ghost, key, True)
        self._reference_many(self._ghost.sampled(keys, self._sample))

    def insert_last(self) -> tuple[int, int] | None:
        """While insertion is LRU's (every key last), where the order is the table's; bimodal insertion
        asks the ghost of each key (on_insert_many)."""
        order = self._order.table_order
        if order is None or self.bimodal:
            return None
        return order, self._sample  # (the keys HashOrder.sampled would pick)

    def on_inserted(self, sampled: list[str]) -> None:
        self._reference_many(sampled)  # (as on_insert_many: the shadows replay with the batch in the cache)

    def on_access(self, key: str) -> None:
        if self._order.touch(key):
            self._reference_many(self._ghost.sampled([key], self._sample))

    def on_access_many(self, keys: list[str]) -> None:
        touched = list(itertools.compress(keys, self._order.touch_many(keys)))
        self._reference_many(self._ghost.sampled(touched, self._sample))

    def read_touch(self) -> tuple[int, int] | None:
        order = self._order.table_order
        return None if order is None else (order, self._sample)  # (the keys HashOrder.sampled would pick)

    def on_touched(self, sampled: list[str]) -> None:
        self._reference_many(sampled)

    def on_remove(self, key: str) -> None:
        if self._order.discard(key):
            self._ghost.add(key)
            _trim(self._ghost, len(self._order))

    def on_remove_many(self, keys: list[str]) -> None:
        self._ghost.add_many(self._order.discard_many(keys))
        _trim(self._ghost, len(self._order))

    def candidates(self) -> Iterator[str]:
        if not self._full:  # asked to evict: the cache is full, the shadows are now its size
            self._full = True
            for shadow in self._shadows:
                shadow.hits = 0.0
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


POLICIES: dict[str, type[LRUPolicy] | type[AdaptivePolicy]] = {
    LRUPolicy.name: LRUPolicy,
    AdaptivePolicy.name: AdaptivePolicy,
}


def make_policy(name: str, order: KeyOrder | None = None) -> EvictionPolicy:
    """The policy `name`, keeping its order in `order` (a fresh DictOrder when None)."""
    from kvstore.errors import InvalidArgumentError

    try:
        kind = POLICIES[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown eviction policy {name!r}; known: {', '.join(POLICIES)}"
        ) from None
    return kind(order=order)
