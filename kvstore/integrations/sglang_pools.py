"""Pages of SGLang's host pools moved to and from the store with no copy: one object per (pool, page,
shard), holding the page's buffers in the order the pool's `get_page_buffer_meta` gives them (K and V of
every layer for MHA, the rows of every layer for MLA, the temporal and conv states for Mamba). Every pool
of one call moves in one batch; an object counts only when all its bytes arrived (a miss beats a partial
page)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvstore.errors import InvalidArgumentError
from kvstore.integrations.paged import allocation, merge_spans
from kvstore.integrations.sglang_keys import PageKeys
from kvstore.store import Store

log = logging.getLogger("kvstore.sglang")

# The tensors of SGLang's host pool classes that page buffers point into (registered once each).
POOL_TENSORS = (
    "kv_buffer",
    "k_buffer",
    "v_buffer",
    "index_k_buffer",
    "index_k_scale_buffer",
    "temporal_buffer",
)
POOL_TENSOR_LISTS = ("conv_buffer",)


@dataclass(frozen=True)
class PageMove:
    """Pages of one pool: their page hashes and the host-pool token indices SGLang gives for them."""

    pool: str
    pages: Sequence[str]
    host_indices: Any


def pool_name(pool: Any) -> str:
    """SGLang's pool name (a PoolName, a str enum, or its value) as a plain string."""
    return str(getattr(pool, "value", pool))


def pool_tensors(host_pool: Any) -> list[Any]:
    found = [getattr(host_pool, name, None) for name in POOL_TENSORS]
    for name in POOL_TENSOR_LISTS:
        found += list(getattr(host_pool, name, None) or [])
    # Tensors or arrays (allocation() takes both); "shape" is what they share.
    tensors = [t for t in found if t is not None and hasattr(t, "shape")]
    for t in tensors:
        if getattr(getattr(t, "device", None), "type", "cpu") != "cpu":
            raise InvalidArgumentError("kvstore's SGLang backend takes host (CPU) pools")
    return tensors


def _flat(values: Sequence[Any]) -> list[int]:
    out: list[int] = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out += [int(x) for x in v]
        else:
            out.append(int(v))
    return out


def page_buffers(host_pool: Any, pages: int, host_indices: Any) -> list[list[tuple[int, int]]]:
    """Per page, its (address, bytes) buffers in the host pool, in the pool's own order."""
    page_size = int(getattr(host_pool, "page_size", 1) or 1)
    if host_indices is None:
        raise InvalidArgumentError(f"no host indices for {pages} pages")
    count = int(host_indices.numel()) if hasattr(host_indices, "numel") else len(host_indices)
    if pages <= 0 or count != pages * page_size:
        raise InvalidArgumentError(f"{count} host indices for {pages} pages of {page_size} tokens")
    raw_ptrs, raw_sizes = host_pool.get_page_buffer_meta(host_indices)
    ptrs, sizes = _flat(raw_ptrs), _flat(raw_sizes)
    if len(ptrs) != len(sizes) or not ptrs or len(ptrs) % pages:
        raise InvalidArgumentError(f"the host pool gave {len(ptrs)} page buffers for {pages} pages")
    per = len(ptrs) // pages
    return [
        list(zip(ptrs[i * per : (i + 1) * per], sizes[i * per : (i + 1) * per], strict=True))
        for i in range(pages)
    ]


class PagePools:
    """SGLang's host pools by name, their store keys, and batch moves over several pools at once."""

    def __init__(self, keys: PageKeys, *, writer: bool) -> None:
        self.keys = keys
        self.writer = writer  # this rank stores rank-replicated pools (MLA: one rank per DCP shard)
        self.pools: dict[str, Any] = {}
        self.tags: dict[str, str] = {}
        self._spans: list[tuple[int, int]] = []  # every pool's allocations (pools may share them)
        self._registered: list[tuple[int, int]] = []

    def add(self, name: str, host_pool: Any) -> None:
        name = pool_name(name)
        self.pools[name] = host_pool
        layout = str(getattr(host_pool, "layout", "") or "")
        self.tags[name] = self.keys.tag(name, layout, getattr(host_pool, "storage_format_tag", None))
        self._spans += [allocation(t) for t in pool_tensors(host_pool)]

    def register(self, store: Store) -> None:
        """Each allocation of the pools with the store, once, so page buffers move with no copy. The KV
        pool comes twice (as the anchor and by name) and pools may share an arena: an allocation that
        overlaps one already registered is left to the store's staging copy."""
        for addr, size in merge_spans(self._spans):
            if (addr, size) in self._registered:
                continue
            if any(addr < a + n and a < addr + size for a, n in self._registered):
                log.info("a host pool allocation overlaps one registered before: moved through a copy")
                continue
            store.register_buffer((addr, size))
            self._registered.append((addr, size))

    def unregister(self, store: Store) -> None:
        for span in self._registered:
            store.unregister_buffer(span)
        self._registered.clear()

    def pool(self, name: Any) -> Any:
        name = pool_name(name)
        if name not in self.pools:
            raise InvalidArgumentError(f"SGLang host pool {name!r} was never registered with kvstore")
        return self.pools[name]

    def object_keys(self, pool: Any, pages: Sequence[str]) -> list[str]:
        name = pool_name(pool)
        self.pool(name)
        return self.keys.keys(name, self.tags[name], pages)

    def stored(self, store: Store, asked: Sequence[tuple[Any, Sequence[str]]]) -> list[list[bool]]:
        """Per (pool, pages) asked, which pages this rank's piece of is stored (one batch lookup)."""
        keys = [self.object_keys(pool, pages) for pool, pages in asked]
        found = store.batch_exists([k for group in keys for k in group]) if any(keys) else []
        out, at = [], 0
        for group in keys:
            out.append(list(found[at : at + len(group)]))
            at += len(group)
        return out

    def _plan(self, moves: Sequence[PageMove]) -> tuple[list[str], list[list[tuple[int, int]]]]:
        keys: list[str] = []
        buffers: list[list[tuple[int, int]]] = []
        for move in moves:
            keys += self.object_keys(move.pool, move.pages)
            buffers += page_buffers(self.pool(move.pool), len(move.pages), move.host_indices)
        return keys, buffers

    def get(self, store: Store, moves: Sequence[PageMove]) -> dict[str, list[bool]]:
        """Loads the pages into their host pools; per pool, which pages arrived whole."""
        keys, buffers = self._plan(moves)
        budget = getattr(store.config, "load_deadline_ms", 0) / 1000  # the connectors' load budget
        extra = {"deadline": budget} if budget else {}
        results = store.batch_get_into_multi_buffers(keys, buffers, **extra) if keys else []
        ok = [r >= 0 and r == sum(s for _, s in parts) for r, parts in zip(results, buffers, strict=True)]
        return self._per_pool(moves, ok)

    def put(self, store: Store, moves: Sequence[PageMove]) -> tuple[dict[str, list[bool]], int]:
        """Stores the pages this rank writes (skipping those already stored); per pool, which pages are
        stored, and how many were already there."""
        mine = [m for m in moves if self.writer or not self.keys.is_replicated(pool_name(m.pool))]
        keys, buffers = self._plan(mine)
        present = store.batch_exists(keys) if keys else []
        todo = [i for i, there in enumerate(present) if not there]
        codes = store.batch_put_from_multi_buffers([keys[i] for i in todo], [buffers[i] for i in todo])
        ok = [True] * len(keys)
        for i, code in zip(todo, codes, strict=True):
            ok[i] = code >= 0
        done = self._per_pool(mine, ok)
        # Rank-replicated pages are the writer rank's to store: for the others there is nothing to do.
        for move in moves:
            done.setdefault(pool_name(move.pool), [True] * len(move.pages))
        return done, len(keys) - len(todo)

    @staticmethod
    def _per_pool(moves: Sequence[PageMove], ok: Sequence[bool]) -> dict[str, list[bool]]:
        out: dict[str, list[bool]] = {}
        at = 0
        for move in moves:
            out[pool_name(move.pool)] = list(ok[at : at + len(move.pages)])
            at += len(move.pages)
        return out
