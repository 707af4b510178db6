"""SGLang HiCache storage backend: HiCache's L3 tier on kvstore.

    python -m sglang.launch_server ... --enable-hierarchical-cache \
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \
        '{"backend_name": "kvstore", "module_path": "kvstore.integrations.sglang",
          "class_name": "KVStoreHiCacheStorage", "interface_v1": 1, "master": "10.0.0.1:50051"}'

With `"interface_v1": 1` SGLang moves pages zero-copy between its host pools and the store (batch_get_v1 /
batch_set_v1 over the pool's page buffers, registered once); without it the plain interface (get/set of
flat page tensors) is used. Hybrid models (sliding-window and Mamba / linear-attention layers beside full
attention) also go through the v2 interface: SGLang hands over its SWA, Mamba and other side pools by name
(register_mem_host_pool_v2) and moves their pages with batch_set_v2 / batch_get_v2; batch_exists_v2
counts a prefix only where every pool has what SGLang's hit policy for it needs (all pages, or the
trailing window).

Keys (kvstore.integrations.sglang_keys): one store group per (pool, page), named by SGLang's own page hash
(a SHA-256 chain over the prefix's token ids) under the namespace (extra config "namespace", else
KVSTORE_NAMESPACE, else the model name); its members are the TP ranks' shards (MHA heads, Mamba state) or
one object (MLA, stored by the one writer rank and read by every rank). A page counts as present only
when its group is complete. Saves skip pages already stored. A page that fails to load is reported as
such and SGLang recomputes it; with the master down every lookup misses and every save is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from sglang.srt.mem_cache.hicache_storage import (
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolTransfer,
    PoolTransferResult,
)

from kvstore.errors import InvalidArgumentError, KVStoreError
from kvstore.integrations.paged import StoreLink, store_settings
from kvstore.integrations.sglang_hits import PoolPresence, restorable
from kvstore.integrations.sglang_keys import PageKeys, RankShape
from kvstore.integrations.sglang_pools import PageMove, PagePools, pool_name

log = logging.getLogger("kvstore.sglang")
T = TypeVar("T")

# Keys of the dynamic backend's extra config that are SGLang's, not ours.
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")
KV = "kv"  # SGLang's PoolName.KV: the pool v1 moves (the full-attention KV of a hybrid model)


def _flat_bytes(tensor: Any, writable: bool) -> np.ndarray:
    """A uint8 view of a CPU tensor or array (no copy)."""
    if hasattr(tensor, "data_ptr"):
        if getattr(tensor.device, "type", "cpu") != "cpu":
            raise InvalidArgumentError("kvstore's SGLang backend takes host (CPU) pages")
        if not tensor.is_contiguous():
            raise InvalidArgumentError("pages must be contiguous")
        import torch  # SGLang always has it; numpy has no bfloat16, so view the bytes first

        array = tensor.detach().reshape(-1).view(torch.uint8).numpy()
    else:
        array = np.asarray(tensor)
    view = array.reshape(-1).view(np.uint8)
    if writable and not view.flags.writeable:
        raise InvalidArgumentError("the destination page is read-only")
    return view


def _rank_shape(config: Any) -> RankShape:
    def field(name: str, default: int) -> int:
        value = getattr(config, name, default)
        return default if value is None else int(value)

    return RankShape(
        tp_rank=field("tp_rank", 0),
        tp_size=field("tp_size", 1),
        pp_rank=field("pp_rank", 0),
        pp_size=field("pp_size", 1),
        cp_rank=field("attn_cp_rank", 0),
        cp_size=field("attn_cp_size", 1),
        dcp_rank=field("dcp_rank", 0),
        dcp_size=field("dcp_size", 1),
    )


class KVStoreHiCacheStorage(HiCacheStorage):
    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        extra = dict(storage_config.extra_config or {}) if storage_config is not None else {}
        self.config = storage_config
        self.link = StoreLink(store_settings({k: v for k, v in extra.items() if k not in _SGLANG_KEYS}))
        namespace = (
            self.link.namespace() or f"sglang:{getattr(storage_config, 'model_name', None) or 'model'}"
        )
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        self.keys = PageKeys(namespace, _rank_shape(storage_config), rank_replicated=self.is_mla)
        self.writer = bool(getattr(storage_config, "is_storage_writer", True))
        self.pools = PagePools(self.keys, writer=self.writer)
        self.mem_pool_host: Any = None
        self.registered_pools: dict[Any, Any] = {}
        self.stats = {"loaded_pages": 0, "failed_pages": 0, "saved_pages": 0, "skipped_pages": 0}

    # -- the host pools --------------------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        """SGLang's KV host pool (the anchor of a hybrid model's pool group), moved by v1."""
        super().register_mem_pool_host(mem_pool_host)
        self.pools.add(KV, mem_pool_host)
        self._register_memory()

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """A named pool of a hybrid model (SWA, Mamba, indexer, ...), moved by v2."""
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        self.pools.add(pool_name(host_pool_name), host_pool)
        self._register_memory()

    def _register_memory(self) -> None:
        store = self.link.get()
        if store is not None:
            self.pools.register(store)

    def _store(self) -> Any:
        store = self.link.get()
        if store is not None:
            self.pools.register(store)  # pools registered while the master was away
        return store

    # -- v1: the KV pool, zero copy ----------------------------------------------------------------------
    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        """The leading pages of the KV pool this rank can load (SGLang MIN-reduces it across ranks)."""
        store = self._store()
        if store is None or not keys:
            return 0
        try:
            (present,) = self.pools.stored(store, [(KV, keys)])
        except KVStoreError as exc:
            log.warning("kvstore lookup failed (%s): a miss", exc)
            return 0
        return present.index(False) if False in present else len(present)

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return self._load([PageMove(KV, keys, host_indices)]).get(KV, [False] * len(keys))

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        return self._save([PageMove(KV, keys, host_indices)]).get(KV, [False] * len(keys))

    # -- v2: every pool of a hybrid model -----------------------------------------------------------------
    def batch_exists_v2(
        self,
        keys: list[str],
        pool_transfers: list[PoolTransfer] | None = None,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> PoolTransferResult:
        """The prefix lengths every pool can restore: the KV pool's leading run, cut by each side pool's
        hit policy (checked against the request's page hashes, as SGLang asks)."""
        store = self._store()
        transfers = list(pool_transfers or [])
        if store is None or not keys:
            return PoolTransferResult(0, {}, [])
        asked = [(KV, keys)] + [(t.name, keys) for t in transfers]
        try:
            present = self.pools.stored(store, asked)
        except KVStoreError as exc:
            log.warning("kvstore lookup failed (%s): a miss", exc)
            return PoolTransferResult(0, {}, [])
        kv = present[0]
        kv_pages = kv.index(False) if False in kv else len(kv)
        pools = [
            PoolPresence(pool_name(t.name), t.hit_policy, len(t.keys or ()), stored)
            for t, stored in zip(transfers, present[1:], strict=True)
        ]
        stops, longest = restorable(kv_pages, pools)
        hits = {
            pool_name(t.name): longest[pool_name(t.name)] for t in transfers if pool_name(t.name) in longest
        }
        if kv_pages:
            hits[KV] = kv_pages
        return PoolTransferResult(stops[-1] if stops else 0, hits, stops)

    def batch_get_v2(
        self, transfers: list[PoolTransfer], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[str, list[bool]]:
        moves = [PageMove(pool_name(t.name), list(t.keys or ()), t.host_indices) for t in transfers]
        return self._load([m for m in moves if m.pages]) | {m.pool: [] for m in moves if not m.pages}

    def batch_set_v2(
        self, transfers: list[PoolTransfer], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[str, list[bool]]:
        moves = [PageMove(pool_name(t.name), list(t.keys or ()), t.host_indices) for t in transfers]
        return self._save([m for m in moves if m.pages]) | {m.pool: [] for m in moves if not m.pages}

    # -- the moves under v1 and v2 -------------------------------------------------------------------------
    def _load(self, moves: Sequence[PageMove]) -> dict[str, list[bool]]:
        if not moves:
            return {}
        store = self._store()
        if store is None:
            return none_moved(moves)
        loaded = self._guarded("get", moves, lambda: self.pools.get(store, moves))
        if loaded is None:
            loaded = none_moved(moves)
        pages = [ok for flags in loaded.values() for ok in flags]
        self.stats["loaded_pages"] += sum(pages)
        self.stats["failed_pages"] += len(pages) - sum(pages)
        return loaded

    def _save(self, moves: Sequence[PageMove]) -> dict[str, list[bool]]:
        if not moves:
            return {}
        store = self._store()
        if store is None:
            return none_moved(moves)
        result = self._guarded("set", moves, lambda: self.pools.put(store, moves))
        if result is None:
            return none_moved(moves)
        saved, skipped = result
        self.stats["saved_pages"] += sum(ok for flags in saved.values() for ok in flags)
        self.stats["skipped_pages"] += skipped
        return saved

    @staticmethod
    def _guarded(verb: str, moves: Sequence[PageMove], move: Callable[[], T]) -> T | None:
        """move(), or None where the store failed it (logged: SGLang recomputes those pages). Invalid
        arguments propagate: SGLang handed over pages that do not fit its own pools."""
        try:
            return move()
        except KVStoreError as exc:
            if isinstance(exc, InvalidArgumentError):
                raise
            log.warning("kvstore %s of %d pages failed: %s", verb, sum(len(m.pages) for m in moves), exc)
            return None

    # -- the plain interface: whole flat pages (tensors) -----------------------------------------------
    def _plain_keys(self, keys: Sequence[str]) -> list[str]:
        """The KV pool's pages as flat tensors (get_data_page(flat=True)): a format of their own."""
        pool = self.mem_pool_host
        layout = str(getattr(pool, "layout", "") or "")
        tag = self.keys.tag(KV, layout, getattr(pool, "storage_format_tag", None), flat=True)
        return self.keys.keys(KV, tag, keys)

    def exists(self, key: str) -> bool:
        store = self.link.get()
        try:
            return store is not None and store.exists(self._plain_keys([key])[0])
        except KVStoreError:
            return False

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: list[str], target_locations: Any = None, target_sizes: Any = None) -> Any:
        if target_locations is None or len(target_locations) != len(keys):
            raise InvalidArgumentError("kvstore's SGLang backend reads into given pages (target_locations)")
        store = self.link.get()
        if store is None:
            return [None] * len(keys)
        views = [_flat_bytes(t, writable=True) for t in target_locations]
        try:
            results = store.batch_get_into(self._plain_keys(keys), views)
        except KVStoreError as exc:
            log.warning("kvstore get of %d pages failed: %s", len(keys), exc)
            return [None] * len(keys)
        return [
            t if r == v.nbytes else None for t, r, v in zip(target_locations, results, views, strict=True)
        ]

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(
        self, keys: list[str], values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        if values is None or len(values) != len(keys):
            raise InvalidArgumentError("batch_set needs one page per key")
        if not self.writer:
            return True
        store = self.link.get()
        if store is None:
            return False
        try:
            codes = store.batch_put_from(
                self._plain_keys(keys), [_flat_bytes(v, writable=False) for v in values]
            )
        except KVStoreError as exc:
            log.warning("kvstore set of %d pages failed: %s", len(keys), exc)
            return False
        return all(code >= 0 for code in codes)

    def clear(self) -> None:
        # The store is shared by every instance (and engine): flushing one instance's cache must not
        # wipe the others'. Objects age out by the store's eviction; `kvstore` admin tools remove all.
        log.info("kvstore keeps the shared cache on clear(): other instances still use it")

    def close(self) -> None:
        store = self.link.current()
        if store is not None:
            self.pools.unregister(store)
        self.link.close()


def none_moved(moves: Sequence[PageMove]) -> dict[str, list[bool]]:
    """Every page of `moves` reported as not moved."""
    return {m.pool: [False] * len(m.pages) for m in moves}


__all__ = ["KVStoreHiCacheStorage"]
