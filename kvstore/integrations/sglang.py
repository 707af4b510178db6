"""SGLang HiCache storage backend: HiCache's L3 tier on kvstore.

    python -m sglang.launch_server ... --enable-hierarchical-cache \
        --hicache-storage-backend dynamic --hicache-storage-backend-extra-config \
        '{"backend_name": "kvstore", "module_path": "kvstore.integrations.sglang",
          "class_name": "KVStoreHiCacheStorage", "interface_v1": 1, "master": "10.0.0.1:50051"}'

With `"interface_v1": 1` SGLang moves pages zero-copy between its host pool and the store (batch_get_v1 /
batch_set_v1 over the pool's page buffers, registered once); without it the plain interface (get/set of
flat page tensors) is used. Keys are SGLang's own page hashes (SHA-256 chains over token ids) under a
namespace (extra config "namespace", else KVSTORE_NAMESPACE, else the model name). MHA pages are stored
as K and V objects per TP rank; MLA pages once, by the one writer rank, and read by every rank.
`batch_exists` counts the leading pages this rank can load (SGLang MIN-reduces it across ranks).
Saves skip pages already stored. A page that fails to load is reported as such and SGLang recomputes it;
with the master down every lookup misses and every save is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

from kvstore import MISS
from kvstore.errors import InvalidArgumentError, KVStoreError
from kvstore.integrations.paged import Registrations, StoreLink, allocation, leading_run, store_settings

log = logging.getLogger("kvstore.sglang")

# Keys of the dynamic backend's extra config that are SGLang's, not ours.
_SGLANG_KEYS = ("backend_name", "module_path", "class_name", "interface_v1")
_POOL_TENSORS = ("kv_buffer", "k_buffer", "v_buffer", "index_k_buffer", "index_k_scale_buffer")


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


class KVStoreHiCacheStorage(HiCacheStorage):
    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: dict[str, Any] | None = None) -> None:
        extra = dict(storage_config.extra_config or {}) if storage_config is not None else {}
        self.config = storage_config
        self.link = StoreLink(store_settings({k: v for k, v in extra.items() if k not in _SGLANG_KEYS}))
        namespace = (
            self.link.namespace() or f"sglang:{getattr(storage_config, 'model_name', None) or 'model'}"
        )
        self.is_mla = bool(getattr(storage_config, "is_mla_model", False))
        tp_rank = int(getattr(storage_config, "tp_rank", 0))
        pp_rank, pp_size = (
            int(getattr(storage_config, "pp_rank", 0)),
            int(getattr(storage_config, "pp_size", 1)),
        )
        stage = f"_{pp_rank}" if pp_size > 1 else ""
        # MLA: one copy per pipeline stage, shared by the TP ranks; MHA: each rank holds its own heads.
        self.suffix = stage if self.is_mla else f"_{tp_rank}{stage}"
        self.writer = bool(getattr(storage_config, "is_storage_writer", True))
        self.prefix = namespace + "/"
        self.mem_pool_host: Any = None
        self._pool_memory: Registrations | None = None
        self.stats = {"loaded_pages": 0, "failed_pages": 0, "saved_pages": 0, "skipped_pages": 0}

    # -- the host pool -----------------------------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        store = self.link.get()
        if store is not None:
            self._register_pool(store)

    def _register_pool(self, store: Any) -> None:
        if self._pool_memory is not None or self.mem_pool_host is None:
            return
        tensors = [getattr(self.mem_pool_host, n, None) for n in _POOL_TENSORS]
        found = [t for t in tensors if t is not None and hasattr(t, "shape")]
        if not found:
            raise InvalidArgumentError(f"the host pool has none of {', '.join(_POOL_TENSORS)}")
        for t in found:
            if getattr(getattr(t, "device", None), "type", "cpu") != "cpu":
                raise InvalidArgumentError("kvstore's SGLang backend takes a host (CPU) pool")
        memory = Registrations([allocation(t) for t in found])
        memory.register(store)  # each allocation once, so page buffers move with no copy
        self._pool_memory = memory

    def _object_keys(self, keys: Sequence[str]) -> list[str]:
        kinds = ("_k",) if self.is_mla else ("_k", "_v")
        return [f"{self.prefix}{key}{self.suffix}{kind}" for key in keys for kind in kinds]

    def _page_buffers(self, keys: Sequence[str], host_indices: Any) -> list[list[tuple[int, int]]]:
        """Per object key, its buffers in the host pool (SGLang's page-buffer contract)."""
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        objects = len(keys) * (1 if self.is_mla else 2)
        if not objects or len(ptrs) % objects or len(ptrs) != len(sizes):
            raise InvalidArgumentError(f"{len(ptrs)} page buffers for {objects} objects")
        per = len(ptrs) // objects
        if self.is_mla:
            return [
                [(int(p), int(s)) for p, s in zip(ptrs[i : i + per], sizes[i : i + per], strict=True)]
                for i in range(0, len(ptrs), per)
            ]
        # MHA: a page's buffers alternate K, V (one pair per layer in layer-first layouts).
        out = []
        for page in range(len(keys)):
            window = slice(page * 2 * per, (page + 1) * 2 * per)
            chunk = list(zip(ptrs[window], sizes[window], strict=True))
            out.append([(int(p), int(s)) for p, s in chunk[0::2]])
            out.append([(int(p), int(s)) for p, s in chunk[1::2]])
        return out

    # -- v1: zero copy through the host pool ----------------------------------------------------------
    def batch_exists(self, keys: list[str], extra_info: Any = None) -> int:
        store = self.link.get()
        if store is None or not keys:
            return 0
        objects = self._object_keys(keys)
        try:
            present = store.batch_exists(objects)
        except KVStoreError as exc:
            log.warning("kvstore lookup failed (%s): a miss", exc)
            return 0
        return leading_run(present, len(objects) // len(keys))

    def batch_get_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        store = self.link.get()
        if store is None or not keys:
            return [False] * len(keys)
        self._register_pool(store)
        buffers = self._page_buffers(keys, host_indices)
        try:
            results = store.batch_get_into_multi_buffers(self._object_keys(keys), buffers)
        except KVStoreError as exc:
            log.warning("kvstore get of %d pages failed: %s", len(keys), exc)
            results = [MISS] * len(buffers)
        ok = [r >= 0 and r == sum(s for _, s in parts) for r, parts in zip(results, buffers, strict=True)]
        per = len(ok) // len(keys)
        pages = [all(ok[i * per : (i + 1) * per]) for i in range(len(keys))]
        self.stats["loaded_pages"] += sum(pages)
        self.stats["failed_pages"] += len(pages) - sum(pages)
        return pages

    def batch_set_v1(self, keys: list[str], host_indices: Any, extra_info: Any = None) -> list[bool]:
        if not keys:
            return []
        if not self.writer:
            return [True] * len(keys)  # MLA: the writer rank stores the page for every rank
        store = self.link.get()
        if store is None:
            return [False] * len(keys)
        self._register_pool(store)
        objects = self._object_keys(keys)
        buffers = self._page_buffers(keys, host_indices)
        try:
            present = store.batch_exists(objects)
            todo = [i for i, there in enumerate(present) if not there]
            codes = store.batch_put_from_multi_buffers([objects[i] for i in todo], [buffers[i] for i in todo])
        except KVStoreError as exc:
            log.warning("kvstore set of %d pages failed: %s", len(keys), exc)
            return [False] * len(keys)
        ok = [True] * len(objects)
        for i, code in zip(todo, codes, strict=True):
            ok[i] = code >= 0
        per = len(objects) // len(keys)
        pages = [all(ok[i * per : (i + 1) * per]) for i in range(len(keys))]
        self.stats["saved_pages"] += sum(pages)
        self.stats["skipped_pages"] += (len(objects) - len(todo)) // per
        return pages

    # -- the plain interface: whole flat pages (tensors) -----------------------------------------------
    def _plain_key(self, key: str) -> str:
        return f"{self.prefix}{key}{self.suffix}_page"

    def exists(self, key: str) -> bool:
        store = self.link.get()
        try:
            return store is not None and store.exists(self._plain_key(key))
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
            results = store.batch_get_into([self._plain_key(k) for k in keys], views)
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
                [self._plain_key(k) for k in keys], [_flat_bytes(v, writable=False) for v in values]
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
        if store is not None and self._pool_memory is not None:
            self._pool_memory.unregister(store)
        self.link.close()


__all__ = ["KVStoreHiCacheStorage"]
