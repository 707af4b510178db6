"""Eviction policies. The master asks a policy for candidates in eviction order and skips the ones
that may not go (leased, pinned, put in progress); a policy only orders keys."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterator


class EvictionPolicy(ABC):
    """Orders evictable keys. Called on every insert, access and removal of a visible object."""

    name = "base"

    @abstractmethod
    def on_insert(self, key: str, size: int) -> None: ...

    @abstractmethod
    def on_access(self, key: str) -> None: ...

    @abstractmethod
    def on_remove(self, key: str) -> None: ...

    @abstractmethod
    def candidates(self) -> Iterator[str]:
        """Keys, first to evict first. The caller stops iterating before it removes anything."""

    @abstractmethod
    def __len__(self) -> int: ...


class LRUPolicy(EvictionPolicy):
    """Least recently used first."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[str, None] = OrderedDict()

    def on_insert(self, key: str, size: int) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def on_access(self, key: str) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def on_remove(self, key: str) -> None:
        self._order.pop(key, None)

    def candidates(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


POLICIES: dict[str, type[EvictionPolicy]] = {LRUPolicy.name: LRUPolicy}


def make_policy(name: str) -> EvictionPolicy:
    from kvstore.errors import InvalidArgumentError

    try:
        return POLICIES[name]()
    except KeyError:
        raise InvalidArgumentError(
            f"unknown eviction policy {name!r}; known: {', '.join(POLICIES)}"
        ) from None
