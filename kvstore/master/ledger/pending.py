"""Puts in progress (started, neither ended nor revoked), and what each client's hold: the master bounds
them per client (MasterConfig.client_put_objects / client_put_bytes), so one client cannot take every
allocation slot or every byte with puts it never ends."""

from __future__ import annotations

from collections.abc import Mapping

from kvstore.master.ledger.objects import NewObject, ObjectMeta


class PutsInProgress:
    def __init__(self, objects: Mapping[str, ObjectMeta]) -> None:
        """`objects`: the ledger's table (a put is charged here as it is placed, a moment before the
        ledger records its object)."""
        self._objects = objects
        # key -> (the put as it started: what ending it needs is there, not read back from the table;
        # its deadline less the stall credit so far). Oldest first: the deadlines are in that order too
        # (each is its start plus put_timeout; a credit moves them all), so expiry reads only the expired.
        self._by_key: dict[str, tuple[NewObject, float]] = {}
        self._credit = 0.0  # seconds of the master's own stalls credited to every put in progress
        self._held: dict[str, list[int]] = {}  # client -> [objects, bytes] its puts in progress hold

    def add(self, new: NewObject) -> None:
        self._by_key[new.key] = (new, new.put_deadline - self._credit)
        writer, charged = new.writer, new.size * len(new.replicas)
        held = self._held.get(writer)
        if held is None:
            self._held[writer] = [1, charged]
        else:
            held[0] += 1
            held[1] += charged

    def pop(self, key: str) -> NewObject | None:
        """Ends the put of `key` (made visible or deleted); its writer's hold shrinks (the entry stays
        at zero: a client's next batch reuses it). None if none was in progress."""
        entry = self._by_key.pop(key, None)
        if entry is None:
            return None
        new = entry[0]
        held = self._held[new.writer]
        held[0] -= 1
        held[1] -= new.size * len(new.replicas)
        return new

    def end_many(self, client_id: str, keys: list[str]) -> tuple[list[NewObject], list[int]]:
        """Ends this client's puts of `keys` (pop of each): the puts as they started, and the positions
        of the keys it had no put of in progress (a key twice: the second)."""
        by_key = self._by_key
        ended, missing = [], []
        for i, key in enumerate(keys):
            entry = by_key.get(key)
            if entry is None or entry[0].writer != client_id:
                missing.append(i)
                continue
            del by_key[key]
            ended.append(entry[0])
        if ended:
            held = self._held[client_id]
            held[0] -= len(ended)
            held[1] -= sum([new.size * len(new.replicas) for new in ended])
        return ended, missing

    def pop_many(self, keys: list[str]) -> None:
        """pop() of each of these keys that has a put in progress."""
        for key in self._by_key.keys() & set(keys):
            self.pop(key)

    def credit(self, seconds: float) -> None:
        """The master did not run for `seconds`: every put in progress has that much longer (O(1))."""
        self._credit += seconds

    def expired(self, now: float) -> list[ObjectMeta]:
        """The puts whose deadline passed, oldest first (reads no further than the first that has not)."""
        out = []
        objects, credit = self._objects, self._credit
        for key, (_, due) in self._by_key.items():
            if due + credit >= now:
                break
            out.append(objects[key])
        return out

    def forget(self, client_id: str) -> None:
        """The client is gone (its puts were ended first)."""
        self._held.pop(client_id, None)

    def held(self, client_id: str) -> tuple[int, int]:
        """(objects, bytes) of this client's puts in progress."""
        objects, nbytes = self._held.get(client_id, (0, 0))
        return objects, nbytes

    def writer(self, key: str) -> str | None:
        """Who is putting `key`; None when no put of it is in progress."""
        entry = self._by_key.get(key)
        return None if entry is None else entry[0].writer

    def values(self) -> list[ObjectMeta]:
        """The objects of the puts in progress (a list: the caller may end some as it goes)."""
        objects = self._objects
        return [objects[key] for key in self._by_key]

    def by(self, client_id: str) -> list[ObjectMeta]:
        objects = self._objects
        return [objects[key] for key, (new, _) in self._by_key.items() if new.writer == client_id]

    def __len__(self) -> int:
        return len(self._by_key)
