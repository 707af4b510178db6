"""A put_start's items: a client sends PutItems ([key, size, checksum] each on the wire); the master reads a
batch as columns (PutColumns: keys, sizes, checksums), so its put path slices lists instead of making and
reading a tuple per item, and makes a PutItem only where it looks at one item alone."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Annotated, NamedTuple, overload

from kvstore.rpc.schema import U64, Int, Key


class PutItem(NamedTuple):
    key: Annotated[str, Key()]
    size: Annotated[int, Int(1, 2**63 - 1)]
    checksum: Annotated[int, Int(0, U64)]  # xxh3-64 of the value


class PutColumns(Sequence[PutItem]):
    """PutItems as three columns of the same length: item i is (keys[i], sizes[i], checksums[i])."""

    __slots__ = ("checksums", "keys", "sizes")

    def __init__(self, keys: list[str], sizes: list[int], checksums: list[int]) -> None:
        self.keys, self.sizes, self.checksums = keys, sizes, checksums

    @classmethod
    def of(cls, items: Sequence[PutItem]) -> PutColumns:
        """`items` as columns (the same object when it is columns already)."""
        if isinstance(items, PutColumns):
            return items
        return cls([i.key for i in items], [i.size for i in items], [i.checksum for i in items])

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, at: int) -> PutItem: ...

    @overload
    def __getitem__(self, at: slice) -> PutColumns: ...

    def __getitem__(self, at: int | slice) -> PutItem | PutColumns:
        if isinstance(at, slice):
            return PutColumns(self.keys[at], self.sizes[at], self.checksums[at])
        return PutItem(self.keys[at], self.sizes[at], self.checksums[at])

    def __iter__(self) -> Iterator[PutItem]:
        rows = zip(self.keys, self.sizes, self.checksums, strict=True)
        return map(tuple.__new__, itertools.repeat(PutItem), rows)

    def __eq__(self, other: object) -> bool:
        """Equal to any sequence of the same items (a list of PutItems, say)."""
        if not isinstance(other, Sequence) or isinstance(other, str | bytes) or len(other) != len(self):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # (mutable columns, like a list)

    def __repr__(self) -> str:
        return f"PutColumns({list(self)!r})"
