"""Puts in progress (started, neither ended nor revoked), and what each client's hold: the master bounds
them per client (MasterConfig.client_put_objects / client_put_bytes), so one client cannot take every
allocation slot or every byte with puts it never ends."""

from __future__ import annotations

from collections.abc import Iterator

from kvstore.master.model import ObjectMeta


class PutsInProgress:
    def __init__(self) -> None:
        self._by_key: dict[str, ObjectMeta] = {}
        self._charged: dict[str, int] = {}  # key -> bytes charged to its writer when it started
        self._held: dict[str, list[int]] = {}  # client -> [objects, bytes] its puts in progress hold

    def add(self, meta: ObjectMeta) -> None:
        charged = meta.size * len(meta.replicas)
        key = meta.key
        self._by_key[key] = meta
        self._charged[key] = charged
        held = self._held.get(meta.writer)
        if held is None:
            self._held[meta.writer] = [1, charged]
        else:
            held[0] += 1
            held[1] += charged

    def pop(self, key: str) -> ObjectMeta | None:
        """Ends the put of `key` (made visible or deleted); its writer's hold shrinks (the entry stays
        at zero: a client's next batch reuses it)."""
        meta = self._by_key.pop(key, None)
        if meta is not None:
            held = self._held[meta.writer]
            held[0] -= 1
            held[1] -= self._charged.pop(key)
        return meta

    def forget(self, client_id: str) -> None:
        """The client is gone (its puts were ended first)."""
        self._held.pop(client_id, None)

    def held(self, client_id: str) -> tuple[int, int]:
        """(objects, bytes) of this client's puts in progress."""
        objects, nbytes = self._held.get(client_id, (0, 0))
        return objects, nbytes

    def get(self, key: str) -> ObjectMeta | None:
        return self._by_key.get(key)

    def values(self) -> Iterator[ObjectMeta]:
        return iter(list(self._by_key.values()))

    def __len__(self) -> int:
        return len(self._by_key)
