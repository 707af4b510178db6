"""What this master removed, so that no restore takes it back.

A removal is acknowledged once the nodes that held the object fenced it off and forgot it
(kvstore.master.ledger.fences). A node this master does not hear from yet does not hear of it: one still
naming what it holds after a master restart, one that restarted itself, or one whose kill timed out
(durable_wait). Were it to name the object afterwards, a restore would take it back as unknown. So each
removed key leaves a tombstone: the generation that was current when it went (every allocation of the
object, and each disk record written from one, has that generation or an older one). A restore refuses
what a tombstone covers; a key put again afterwards has newer generations and is taken as usual.

A removal's tombstone lasts until MAX_TOMBSTONES newer ones crowd it out, never by time: a node cut off
longer than the client TTL is dropped (its kills thrown away) and may come back much later, naming from
its catalog an object removed meanwhile; this master handed that allocation out, so only the tombstone
tells a removal from a loss. One crowded out raises `floor`: from then on an unknown key's allocation at or
below it is refused (it may be a removal forgotten), unless the key was lost with its segment (`lose`: a
node restarting, which names its objects back within twice the client TTL) and not removed since. So an
acknowledged removal does not come back (one narrow case: past 2^18 removals, an earlier value of a key
lost with its segment, named by a third node within those seconds); past 2^18 removals, an object of a
node away longer than that is a miss. Tombstones named by nodes (an earlier master's) and an eviction's
(MAX_EVICTED, apart, so a full cache's churn never crowds a removal's out) last `until` (twice the client
TTL), and never lapse while a segment is being restored (it may yet name them).
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
        self._lost = _Book(limit)  # keys that went with their segment, not removed (generation unused)
        self.floor = 0  # the newest removal crowded out: an unknown key at or below it is refused
        self.refused = 0  # replicas and disk records refused because they were removed

    def bury(self, keys: Iterable[str], gen: int, until: float, evicted: bool = False) -> None:
        """`keys` were removed (or `evicted`) while `gen` was the newest generation handed out."""
        if evicted:
            self._evicted.bury(((key, gen) for key in keys), until)
            return
        keys = list(keys)
        self.floor = max(self.floor, self._removed.bury(((key, gen) for key in keys), until))
        for key in keys:  # a key lost with its segment, put again and removed: its removal wins
            self._lost.by_key.pop(key, None)

    def lose(self, keys: Iterable[str], until: float) -> None:
        """`keys` went with their segment (its node gone or restarting), not removed: what the node names
        back of them is taken, even at or below `floor`, until `until`."""
        self._lost.bury(((key, 0) for key in keys), until)

    def forgotten(self, key: str, gen: int) -> bool:
        """An allocation (or disk record) of `key`, unknown to this master, in generation `gen` may be a
        removal whose tombstone was crowded out: it is refused."""
        return gen <= self.floor and key not in self._lost.by_key

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
        """Drops the named and evicted tombstones and the lost keys past their time, unless some segment
        is being restored (`restoring()`, asked only when one is due). A removal's stay (see above)."""
        timed = (self._named, self._evicted, self._lost)
        if any(book.due(now) for book in timed) and not restoring():
            for book in timed:
                book.lapse(now)

    def __len__(self) -> int:
        return sum(len(book.by_key) for book in self._books)

    def entries(self) -> dict[str, dict[str, tuple[int, float]]]:
        """Every book's tombstones (key -> generation, until): what a replay of the records rebuilds."""
        books = {"removed": self._removed, "named": self._named, "evicted": self._evicted, "lost": self._lost}
        return {name: dict(book.by_key) for name, book in books.items()}

    def stats(self) -> dict[str, int]:
        return {
            "tombstones": len(self._removed.by_key),
            "tombstones_named": len(self._named.by_key),
            "tombstones_evicted": len(self._evicted.by_key),
            "tombstones_dropped": sum(book.dropped for book in self._books),
            "tombstones_lost_keys": len(self._lost.by_key),
            "restore_refused_removed": self.refused,
        }


class _Book:
    """key -> (generation, until), at most `limit`. Insertion order is deadline order (a key buried again
    goes to the end with a later deadline): lapsing reads only the front, the limit drops the oldest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.by_key: dict[str, tuple[int, float]] = {}
        self.dropped = 0  # dropped before their time (the limit)

    def bury(self, tombs: Iterable[tuple[str, int]], until: float) -> int:
        """Returns the newest generation crowded out by the limit (0: none)."""
        by_key = self.by_key
        for key, gen in tombs:
            old = by_key.pop(key, None)
            by_key[key] = (gen if old is None else max(gen, old[0]), until)
        over = len(by_key) - self.limit
        if over <= 0:
            return 0
        self.dropped += over
        return self._drop(over)

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

    def _drop(self, n: int) -> int:
        by_key, newest = self.by_key, 0
        for key in [k for k, _ in zip(by_key, range(n), strict=False)]:
            newest = max(newest, by_key.pop(key)[0])
        return newest
