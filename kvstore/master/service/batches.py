"""Where a batch's run of plain items ends: the master takes the run in one call and the item after it
alone (kvstore.master.service.puts, kvstore.master.service.restore)."""

from __future__ import annotations

from collections.abc import Callable


def first_where(keys: list[str], n: int, test: Callable[[str], object]) -> int:
    """The index of the first of keys[:n] that passes `test`, else n."""
    for i, key in enumerate(keys[:n]):
        if test(key):
            return i
    return n


def first_repeat(keys: list[str], n: int) -> int:
    """The index of the first of keys[:n] seen before it, else n."""
    if len(set(keys[:n])) == n:
        return n
    seen: set[str] = set()
    for i, key in enumerate(keys[:n]):
        if key in seen:
            return i
        seen.add(key)
    return n
