"""Puts in progress (started, neither ended nor revoked), and what each client's hold: the master bounds
them per client (MasterConfig.client_put_objects / client_put_bytes), so one client cannot take every
allocation slot or every byte with puts it never ends.

A view: the object table keeps them (csrc/meta/puts_in_progress.h), as the ledger starts puts
(PutsStarted) and ends them (PutsCommitted, or the object dropped), with no Python object per put."""

from __future__ import annotations

from kvstore.master.ledger.objects import ObjectMeta, Objects


class PutsInProgress:
    def __init__(self, objects: Objects) -> None:
        """`objects`: the ledger's table, which keeps the puts in progress."""
        self._objects = objects
        self._table = objects.table

    def credit(self, seconds: float) -> None:
        """The master did not run for `seconds`: every put in progress has that much longer (O(1))."""
        self._table.puts_credit(seconds)

    def expired(self, now: float) -> list[ObjectMeta]:
        """The puts whose deadline passed, oldest first (reads no further than the first that has not)."""
        return self._views(self._table.puts_expired(now))

    def held(self, client_id: str) -> tuple[int, int]:
        """(objects, bytes) of this client's puts in progress."""
        number = self._objects.known_writer(client_id)
        return (0, 0) if number is None else self._table.puts_held(number)

    def writer(self, key: str) -> str | None:
        """Who is putting `key`; None when no put of it is in progress."""
        meta = self._objects.get(key)
        return None if meta is None or meta.complete else meta.writer

    def values(self) -> list[ObjectMeta]:
        """The objects of the puts in progress, oldest first (a list: the caller may end some as it goes)."""
        return self._views(self._table.puts_of(0))

    def by(self, client_id: str) -> list[ObjectMeta]:
        number = self._objects.known_writer(client_id)
        return [] if number is None else self._views(self._table.puts_of(number))

    def __len__(self) -> int:
        return self._table.puts_count()

    def _views(self, found: list[tuple[str, int]]) -> list[ObjectMeta]:
        objects = self._objects
        return [ObjectMeta(objects, ref, key) for key, ref in found]
