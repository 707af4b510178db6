"""Stand-in for sglang.srt.mem_cache.hicache_storage (SGLang 0.5.23): the names kvstore's backend and its
tests use (the storage config, the v2 transfer descriptors and the base class), with the real fields,
defaults and signatures. Tensors are typed Any: this environment has no torch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool
    enable_storage_metrics: bool
    is_page_first_layout: bool
    model_name: str | None
    tp_lcm_size: int | None = None
    should_split_heads: bool = False
    dp_rank: int = 0
    extra_config: dict | None = None
    dcp_size: int = 1
    dcp_rank: int = 0
    logical_page_size: int | None = None

    def __post_init__(self) -> None:
        # SGLang refuses these shapes when it builds the config; a backend never sees them.
        if self.dcp_size < 1 or not 0 <= self.dcp_rank < self.dcp_size:
            raise ValueError("Invalid DCP size or rank for HiCache storage.")
        if self.dcp_size == 1:
            return
        if not self.is_mla_model:
            raise ValueError("DCP storage shard identity currently requires MLA.")
        if (
            self.tp_size % self.dcp_size
            or not 0 <= self.tp_rank < self.tp_size
            or self.tp_rank % self.dcp_size != self.dcp_rank
        ):
            raise ValueError("DCP storage requires contiguous DCP groups within TP.")
        if not self.logical_page_size or self.logical_page_size < 0 or self.logical_page_size % self.dcp_size:
            raise ValueError("DCP storage requires a DCP-aligned logical page size.")

    @property
    def is_storage_writer(self) -> bool:
        """MLA: one writer per DCP shard (the first DCP group); other models: every TP rank."""
        return not self.is_mla_model or self.tp_rank == self.dcp_rank


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: list[str] | None = None  # the page hashes before the call's keys, from the sequence start
    extra_info: dict | None = None


class PoolName(str, Enum):
    """The pool names SGLang hands to v2 (register_mem_host_pool_v2, PoolTransfer.name)."""

    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    AUXILIARY_SWA = "auxiliary_swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C1 = "deepseek_v4_c1"
    DEEPSEEK_V4_C1_INDEXER = "deepseek_v4_c1_indexer"
    DEEPSEEK_V4_C1_INDEXER_SCALE = "deepseek_v4_c1_indexer_scale"
    DEEPSEEK_V4_C2 = "deepseek_v4_c2"
    DEEPSEEK_V4_C2_INDEXER = "deepseek_v4_c2_indexer"
    DEEPSEEK_V4_C2_INDEXER_SCALE = "deepseek_v4_c2_indexer_scale"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C4_INDEXER_SCALE = "deepseek_v4_c4_indexer_scale"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_ROPE = "deepseek_v4_c4_rope"
    DEEPSEEK_V4_C128_ROPE = "deepseek_v4_c128_rope"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    """What batch_exists_v2 needs of a pool for a prefix: every page, the last len(keys) pages, or whole
    key groups at block boundaries."""

    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"
    BLOCK_GROUPS = "block_groups"


@dataclass
class PoolTransfer:
    """One pool's pages in a v2 call: host_indices + keys between host and storage."""

    name: PoolName
    host_indices: Any = None
    device_indices: Any = None
    keys: list[str] | None = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: list[Any] | None = None
    indices_from_pool: PoolName | None = None
    block_pages: int = 0
    group_pages: int = 0


@dataclass
class PoolTransferResult:
    """batch_exists_v2's answer: the usable KV prefix, each pool's pages, the restorable prefix lengths."""

    kv_hit_pages: int
    extra_pool_hit_pages: dict[str, int]
    restorable_prefix_pages: list[int] | None = None

    @classmethod
    def empty(cls) -> PoolTransferResult:
        return cls(0, {})

    def update_kv_hit_pages(self, kv_hit_pages: int) -> None:
        self.kv_hit_pages = max(self.kv_hit_pages, kv_hit_pages)

    def update_extra_pool_hit_pages(self, results: dict[str, int]) -> None:
        self.extra_pool_hit_pages.update(results)


class HiCacheStorage(ABC):
    """HiCache's L3 backend interface: v1 and v2 batch calls over host pools, the plain calls abstract."""

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def on_host_pools_registered(self) -> None:
        """Called once after the first registration burst (the anchor pool and every v2 pool); a no-op
        unless a backend overrides it, as in SGLang."""
        return None

    def batch_exists_v2(
        self,
        keys: list[str],
        pool_transfers: list[PoolTransfer] | None = None,
        extra_info: HiCacheStorageExtraInfo | None = None,
    ) -> PoolTransferResult:
        raise NotImplementedError()

    def batch_get_v2(
        self, transfers: list[PoolTransfer], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[str, list[bool]]:
        raise NotImplementedError()

    def batch_set_v2(
        self, transfers: list[PoolTransfer], extra_info: HiCacheStorageExtraInfo | None = None
    ) -> dict[str, list[bool]]:
        raise NotImplementedError()

    def batch_get_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool] | None:
        return None

    def batch_set_v1(
        self, keys: list[str], host_indices: Any, extra_info: HiCacheStorageExtraInfo | None = None
    ) -> list[bool] | None:
        return None

    @abstractmethod
    def get(self, key: str, target_location: Any | None = None, target_sizes: Any | None = None) -> Any: ...

    @abstractmethod
    def batch_get(
        self, keys: list[str], target_locations: Any | None = None, target_sizes: Any | None = None
    ) -> Any: ...

    @abstractmethod
    def set(
        self,
        key: str,
        value: Any | None = None,
        target_location: Any | None = None,
        target_sizes: Any | None = None,
    ) -> bool: ...

    @abstractmethod
    def batch_set(
        self,
        keys: list[str],
        values: Any | None = None,
        target_locations: Any | None = None,
        target_sizes: Any | None = None,
    ) -> bool: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    def batch_exists(self, keys: list[str], extra_info: HiCacheStorageExtraInfo | None = None) -> int:
        """The leading run of keys that exist."""
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self) -> None:
        return None

    def get_stats(self) -> Any:
        return None
