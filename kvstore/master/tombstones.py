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
name them). At most MAX_TOMBSTONES are kept, oldest dropped first (counted: `tombstones_dropped`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

MAX_TOMBSTONES = 1 << 18  # ~50 MB at most (a key, its generation and deadline)


class Tombstones:
    def __init__(self, limit: int = MAX_TOMBSTONES) -> None:
        self._limit = limit
        # key -> (generation, until). Insertion order is deadline order (a key buried again goes to the
        # end with a later deadline): lapsing reads only the front.
        self._by_key: dict[str, tuple[int, float]] = {}
        self.refused = 0  # replicas and disk records refused because they were removed
        self.dropped = 0  # tombstones dropped before their time (the limit)

    def bury(self, keys: Iterable[str], gen: int, until: float) -> None:
        """`keys` were removed (or evicted) while `gen` was the newest generation handed out."""
        by_key = self._by_key
        for key in keys:
            by_key.pop(key, None)
            by_key[key] = (gen, until)
        self._bound()

    def _bound(self) -> None:
        by_key = self._by_key
        over = len(by_key) - self._limit
        if over > 0:
            for key in list(_first(by_key, over)):
                del by_key[key]
            self.dropped += over

    def covers(self, key: str, gen: int) -> bool:
        """An allocation (or a disk record written from one) of `key` in generation `gen` was removed."""
        tomb = self._by_key.get(key)
        return tomb is not None and gen <= tomb[0]

    def learn(self, tombs: Iterable[tuple[str, int]], until: float) -> None:
        """Removals a node remembers (made by an earlier master): each kept at the newer generation."""
        by_key = self._by_key
        for key, gen in tombs:
            old = by_key.pop(key, None)
            by_key[key] = (gen if old is None else max(gen, old[0]), until)
        self._bound()

    def generation(self, key: str) -> int:
        """The generation `key`'s removal covers; 0 when it has no tombstone."""
        tomb = self._by_key.get(key)
        return 0 if tomb is None else tomb[0]

    def any(self) -> bool:
        return bool(self._by_key)

    def lapse(self, now: float, restoring: Callable[[], bool]) -> None:
        """Drops the tombstones past their time, unless some segment is being restored (`restoring()`,
        asked only when one is due)."""
        by_key = self._by_key
        due = 0
        for _, until in by_key.values():
            if until > now:
                break
            due += 1
        if due and not restoring():
            for key in list(_first(by_key, due)):
                del by_key[key]

    def __len__(self) -> int:
        return len(self._by_key)

    def stats(self) -> dict[str, int]:
        return {
            "tombstones": len(self._by_key),
            "tombstones_dropped": self.dropped,
            "restore_refused_removed": self.refused,
        }


def _first(by_key: dict[str, tuple[int, float]], n: int) -> Iterable[str]:
    it = iter(by_key)
    for _ in range(n):
        yield next(it)
