"""What the SGLang scenarios share: kvstore's HiCache backend built by SGLang's real `dynamic` storage-backend
factory, and page keys from SGLang's own page-hash function.

Imported by plain `import sglang_common` (a scenario runs as `python scenarios/<name>.py`, so this folder is
sys.path[0]).
"""

from __future__ import annotations

from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str


def kvstore_backend(
    pool: object | None,
    *,
    namespace: str,
    model_name: str,
    mla: bool,
    page_first: bool,
    interface_v1: bool = True,
    tp_rank: int = 0,
    tp_size: int = 1,
) -> object:
    """kvstore's backend as SGLang's factory makes it for one TP rank (`pool`: the host pool it is given,
    None where the caller registers pools itself)."""
    config = HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=mla,
        enable_storage_metrics=False,
        is_page_first_layout=page_first,
        model_name=model_name,
        extra_config={
            "backend_name": "kvstore",
            "module_path": "kvstore.integrations.sglang",
            "class_name": "KVStoreHiCacheStorage",
            "interface_v1": int(interface_v1),
            "namespace": namespace,
        },
    )
    return StorageBackendFactory.create_backend("dynamic", config, pool)


def page_keys(tokens: list[int], page: int) -> list[str]:
    """SGLang's chained hash of every whole page of `tokens`."""
    keys, prior = [], None
    for start in range(0, len(tokens) - page + 1, page):
        prior = get_hash_str(tokens[start : start + page], prior)
        keys.append(prior)
    return keys
