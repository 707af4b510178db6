"""Which prefixes of a request SGLang can restore from the store, pool by pool (HiCache's v2 hit policies).

The KV pool's leading run of stored pages bounds everything. Each other pool then keeps the prefix
lengths it can serve: an "all_pages" pool (e.g. a DSA indexer) needs every page of the prefix, a
"trailing_pages" pool (SWA windows, Mamba state) only the last N pages before the cut. A length is
restorable when every pool keeps it; the set can have holes (a Mamba state stored at pages 4 and 8 but
not 6), so all of it goes back to SGLang, which intersects the sets of its ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvstore.errors import NotSupportedError

ALL_PAGES = "all_pages"
TRAILING_PAGES = "trailing_pages"


@dataclass(frozen=True)
class PoolPresence:
    """One pool's stored pages among the first `kv_pages` of a request."""

    name: str
    policy: str  # SGLang's PoolHitPolicy value
    trailing: int  # pages a trailing pool needs before the cut (SGLang: len(transfer.keys), at least 1)
    stored: Sequence[bool]


def pool_stops(pool: PoolPresence, kv_pages: int) -> set[int]:
    """The prefix lengths (1..kv_pages) this pool can serve."""
    stored = list(pool.stored[:kv_pages]) + [False] * max(0, kv_pages - len(pool.stored))
    policy = str(getattr(pool.policy, "value", pool.policy))
    if policy == ALL_PAGES:
        run = stored.index(False) if False in stored else kv_pages
        return set(range(1, run + 1))
    if policy == TRAILING_PAGES:
        window = max(1, pool.trailing)
        return {end for end in range(1, kv_pages + 1) if all(stored[max(0, end - window) : end])}
    raise NotSupportedError(f"kvstore's SGLang backend has no hit policy {policy!r} (pool {pool.name})")


def restorable(kv_pages: int, pools: Sequence[PoolPresence]) -> tuple[list[int], dict[str, int]]:
    """(the restorable prefix lengths in order, each pool's longest own stop) for a KV run of kv_pages."""
    stops = set(range(1, kv_pages + 1))
    longest: dict[str, int] = {}
    for pool in pools:
        own = pool_stops(pool, kv_pages)
        if own:
            longest[pool.name] = max(own)
        stops &= own
    return sorted(stops), longest
