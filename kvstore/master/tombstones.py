"""What this master removed, so that no restore takes it back.

A removal is acknowledged once the nodes that held the object fenced it off and forgot it
(kvstore.master.fences). A node this master does not hear from yet does not hear of it: one still
naming what it holds after a master restart, one that restarted itself, or one whose kill timed out
(durable_wait). Were it to name the object afterwards, a restore would take it back as unknown. So each
removed key leaves a tombstone: the generation that was current when it went (every allocation of the
object, and each disk record written from one, has that generation or an older one). A restore refuses
what a tombstone covers; a key put again afterwards has newer generations and is taken as usual.

Tombstones are needed only while a node may still name the key without having applied its kill: they
last `until` (the caller gives twice the client TTL: a node silent longer is dropped, and comes back
only by registering and restoring afresh) and never lapse while a segment is being restored (it may yet
name them). At most MAX_TOMBSTONES are kept, oldest dropped first (counted: `tombstones_dropped`); an
eviction's are kept apart (MAX_EVICTED), so a full cache's churn never crowds a removal's out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

MAX_TOMBSTONES = 1 << 18  # removals remembered at most (~50 MB: a key, its generation and deadline)
MAX_EVICTED = 1 << 16  # evictions remembered at most, apart: a full cache's churn never crowds removals out


class Tombstones:
    def __init__(self, limit: int = MAX_TOMBSTONES, evicted_limit: int = MAX_EVICTED) -> None:
        self._removed = _Book(limit)
        self._named = _Book(limit)  # an earlier master's, as nodes name them: apart, none crowds ours out
        # An evicted object taken back holds the key's right bytes still; its tombstone is kept here only
        # (its kills name none: nodes do not keep evictions).
        self._evicted = _Book(evicted_limit)
        self.refused = 0  # replicas and disk records refused because they were removed

    def bury(self, keys: Iterable[str], gen: int, until: float, evicted: bool = False) -> None:
        """`keys` were removed (or `evicted`) while `gen` was the newest generation handed out."""
        (self._evicted if evicted else self._removed).bury(((key, gen) for key in keys), until)

    def learn(self, tombs: Iterable[tuple[str, int]], until: float) -> None:
        """Removals a node remembers (made by an earlier master): each kept at the newer generation."""
        self._named.bury(tombs, until)

    def covers(self, key: str, gen: int) -> bool:
        """An allocation (or a disk record written from one) of `key` in generation `gen` was removed or
        evicted."""
        tomb = max(self._removed.generation(key), self._named.generation(key), self._evicted.generation(key))
        return tomb > 0 and gen <= tomb  # (generations start at 1: 0 is none)

    def generation(self, key: str) -> int:
        """The generation `key`'s removal covers (what its kills tell nodes); 0 when it has none."""
        return max(self._removed.generation(key), self._named.generation(key))

    def any(self) -> bool:
        return any(book.by_key for book in self._books)

    @property
    def _books(self) -> tuple[_Book, _Book, _Book]:
        return self._removed, self._named, self._evicted

    def lapse(self, now: float, restoring: Callable[[], bool]) -> None:
        """Drops the tombstones past their time, unless some segment is being restored (`restoring()`,
        asked only when one is due)."""
        if any(book.due(now) for book in self._books) and not restoring():
            for book in self._books:
                book.lapse(now)

    def __len__(self) -> int:
        return sum(len(book.by_key) for book in self._books)

    def stats(self) -> dict[str, int]:
        return {
            "tombstones": len(self._removed.by_key),
            "tombstones_named": len(self._named.by_key),
            "tombstones_evicted": len(self._evicted.by_key),
            "tombstones_dropped": sum(book.dropped for book in self._books),
            "restore_refused_removed": self.refused,
        }


class _Book:
    """key -> (generation, until), at most `limit`. Insertion order is deadline order (a key buried again
    goes to the end with a later deadline): lapsing reads only the front, the limit drops the oldest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.by_key: dict[str, tuple[int, float]] = {}
        self.dropped = 0  # dropped before their time (the limit)

    def bury(self, tombs: Iterable[tuple[str, int]], until: float) -> None:
        by_key = self.by_key
        for key, gen in tombs:
            old = by_key.pop(key, None)
            by_key[key] = (gen if old is None else max(gen, old[0]), until)
        over = len(by_key) - self.limit
        if over > 0:
            self._drop(over)
            self.dropped += over

    def generation(self, key: str) -> int:
        tomb = self.by_key.get(key)
        return 0 if tomb is None else tomb[0]

    def due(self, now: float) -> bool:
        first = next(iter(self.by_key.values()), None)
        return first is not None and first[1] <= now

    def lapse(self, now: float) -> None:
        due = 0
        for _, until in self.by_key.values():
            if until > now:
                break
            due += 1
        self._drop(due)

    def _drop(self, n: int) -> None:
        by_key = self.by_key
        for key in [k for k, _ in zip(by_key, range(n), strict=False)]:
            del by_key[key]
