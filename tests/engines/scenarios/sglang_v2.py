"""Real SGLang, hybrid host pools: its `dynamic` storage-backend factory builds kvstore's HiCache backend,
which is driven through the v2 interface as SGLang's HybridCacheController drives it: the KV anchor
pool registered first (register_mem_pool_host), then every pool of the group by name
(register_mem_host_pool_v2: KV, SWA, Mamba), side pools saved with batch_set_v2 before the KV pool with
batch_set_v1, lookups with batch_exists_v2 and PoolTransfers carrying SGLang's own hit policies
(trailing windows for SWA and Mamba), loads with batch_get_v1 + batch_get_v2. Page keys come from
SGLang's own page-hash function. Prints JSON. Runs in the engines tier's virtual environment.

SGLang's host pool classes (sglang.srt.mem_cache.pool_host.*) do not import here: their package pulls
sglang.srt.configs and sglang.srt.layers, which need torchvision, dill and gguf, dependencies the tier
leaves out (it installs SGLang without them). The pools below follow those classes' page-buffer
contracts exactly: MHATokenToKVPoolHost.get_page_buffer_meta in its layer_first and page_first layouts
(K and V per layer, or per page), MLATokenToKVPoolHost's page_first one (one buffer per page) and
MambaPoolHost's (page_size 1; temporal state, then each conv state).
The JSON says why the real classes did not import.
"""

from __future__ import annotations

import importlib
import json

import torch
from sglang.srt.mem_cache.hicache_storage import (
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
)
from sglang_common import kvstore_backend, page_keys

from kvstore import Store

PAGE = 16
PAGES = 6
HEADS, DIM = 2, 16
SWA_WINDOW = 2  # pages a sliding-window layer needs before the cut
SLOTS = 32  # host slots (Mamba) / pages (KV, SWA)


class MHAHostPool:
    """MHATokenToKVPoolHost's buffer and page-buffer contract: kv_buffer [2 (K, V), ...]."""

    def __init__(self, layers: int, layout: str) -> None:
        self.layer_num, self.layout, self.page_size = layers, layout, PAGE
        self.size = SLOTS * PAGE
        self.storage_format_tag = None
        shape = (layers, self.size) if layout == "layer_first" else (self.size, layers)
        self.kv_buffer = torch.zeros((2, *shape, HEADS, DIM), dtype=torch.bfloat16)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        item, base = self.kv_buffer.element_size(), self.kv_buffer.data_ptr()
        row = HEADS * DIM * item
        v_offset = self.layer_num * self.size * row
        ptrs: list[int] = []
        for first in indices.tolist()[:: self.page_size]:
            if self.layout == "layer_first":
                for layer in range(self.layer_num):
                    k = base + first * row + layer * self.size * row
                    ptrs += [k, k + v_offset]
                sizes = [PAGE * row] * len(ptrs)
            else:
                k = base + first * self.layer_num * row
                ptrs += [k, k + v_offset]
                sizes = [self.layer_num * PAGE * row] * len(ptrs)
        return ptrs, sizes

    def page(self, slot: int) -> torch.Tensor:
        tokens = slice(slot * PAGE, (slot + 1) * PAGE)
        kv = self.kv_buffer[:, :, tokens] if self.layout == "layer_first" else self.kv_buffer[:, tokens]
        return kv.clone()

    def indices(self, slots: list[int]) -> torch.Tensor:
        return torch.cat([torch.arange(s * PAGE, (s + 1) * PAGE) for s in slots]) if slots else torch.empty(0)


class MLAHostPool:
    """MLATokenToKVPoolHost's page_first contract: kv_buffer [tokens, layers, 1, kv_cache_dim], one
    buffer per page."""

    def __init__(self, layers: int) -> None:
        self.layer_num, self.layout, self.page_size = layers, "page_first", PAGE
        self.storage_format_tag = None
        self.kv_buffer = torch.zeros((SLOTS * PAGE, layers, 1, 2 * DIM), dtype=torch.bfloat16)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        row = self.kv_buffer[0].numel() * self.kv_buffer.element_size()
        ptrs = [self.kv_buffer.data_ptr() + first * row for first in indices.tolist()[:: self.page_size]]
        return ptrs, [PAGE * row] * len(ptrs)

    def page(self, slot: int) -> torch.Tensor:
        return self.kv_buffer[slot * PAGE : (slot + 1) * PAGE].clone()

    def indices(self, slots: list[int]) -> torch.Tensor:
        return torch.cat([torch.arange(s * PAGE, (s + 1) * PAGE) for s in slots])


class MambaHostPool:
    """MambaPoolHost's contract: page_size 1, page_first temporal [slots, layers, ...] and conv states."""

    def __init__(self, layers: int) -> None:
        self.layout, self.page_size, self.num_mamba_layers = "page_first", 1, layers
        self.storage_format_tag = None
        self.temporal_buffer = torch.zeros((SLOTS, layers, 4, 8), dtype=torch.float32)
        self.conv_buffer = [torch.zeros((SLOTS, layers, 3, 8), dtype=torch.bfloat16)]

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        ptrs, sizes = [], []
        for slot in indices.tolist():
            for buf in (self.temporal_buffer, *self.conv_buffer):
                per_slot = buf[0].numel() * buf.element_size()
                ptrs.append(buf.data_ptr() + slot * per_slot)
                sizes.append(per_slot)
        return ptrs, sizes

    def page(self, slot: int) -> list[torch.Tensor]:
        return [buf[slot].clone() for buf in (self.temporal_buffer, *self.conv_buffer)]

    def indices(self, slots: list[int]) -> torch.Tensor:
        return torch.tensor(slots, dtype=torch.int64)


def real_pool_import_error() -> str:
    try:
        for module in ("sglang.srt.mem_cache.pool_host.mha", "sglang.srt.mem_cache.pool_host.mamba"):
            importlib.import_module(module)
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def backend(namespace: str, *, mla: bool = False, tp_rank: int = 0, tp_size: int = 1) -> object:
    return kvstore_backend(
        None,
        namespace=namespace,
        model_name="tiny-hybrid",
        mla=mla,
        page_first=False,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )


def attach(storage: object, kv: object, sides: dict[PoolName, object]) -> None:
    """As HybridCacheController.attach_storage_backend: the anchor, then every entry of the group."""
    storage.register_mem_pool_host(kv)  # type: ignore[attr-defined]
    for name, pool in {PoolName.KV: kv, **sides}.items():
        storage.register_mem_host_pool_v2(pool, name)  # type: ignore[attr-defined]
    storage.on_host_pools_registered()  # type: ignore[attr-defined]


def randomize(gen: torch.Generator, *tensors: torch.Tensor) -> None:
    for t in tensors:
        t.copy_(torch.randn(t.shape, generator=gen).to(t.dtype))


def transfer(name: PoolName, pool: object, keys: list[str], slots: list[int]) -> PoolTransfer:
    return PoolTransfer(name=name, keys=keys, host_indices=pool.indices(slots))  # type: ignore[attr-defined]


def lookups(keys: list[str]) -> list[PoolTransfer]:
    """batch_exists_v2's side pools as the controller asks: trailing windows, keys = the window's pages."""
    return [
        PoolTransfer(name=PoolName.SWA, keys=keys[-SWA_WINDOW:], hit_policy=PoolHitPolicy.TRAILING_PAGES),
        PoolTransfer(name=PoolName.MAMBA, keys=keys[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES),
    ]


def exists(storage: object, keys: list[str]) -> list[object]:
    result = storage.batch_exists_v2(keys, lookups(keys))  # type: ignore[attr-defined]
    return [result.kv_hit_pages, result.restorable_prefix_pages]


def hybrid(out: dict[str, object], keys: list[str], ns: str) -> None:
    """MHA full-attention KV (layer_first) + SWA pool (page_first) + Mamba state, one TP rank."""
    gen = torch.Generator().manual_seed(7)
    a_kv, a_swa, a_mamba = MHAHostPool(2, "layer_first"), MHAHostPool(3, "page_first"), MambaHostPool(2)
    randomize(gen, a_kv.kv_buffer, a_swa.kv_buffer, a_mamba.temporal_buffer, *a_mamba.conv_buffer)
    a = backend(ns)
    attach(a, a_kv, {PoolName.SWA: a_swa, PoolName.MAMBA: a_mamba})
    out["type"] = type(a).__name__
    out["exists_before"] = exists(a, keys)
    slots = list(range(PAGES))  # A holds page p in KV / SWA slot p and its Mamba state in slot 10 + p
    # Side pools first (the controller's order): SWA for every page, Mamba state at pages 4 and 6 only.
    sides = [transfer(PoolName.SWA, a_swa, keys, slots), transfer(PoolName.MAMBA, a_mamba, keys[3:4], [13])]
    sides.append(transfer(PoolName.MAMBA, a_mamba, keys[5:6], [15]))
    out["set_v2"] = {str(k): v for k, v in a.batch_set_v2(sides).items()}
    out["exists_sides_only"] = exists(a, keys)  # the KV pool not yet stored: nothing counts
    out["set_v1"] = a.batch_set_v1(keys, a_kv.indices(slots))
    out["set_again_skipped"] = [a.batch_set_v2(sides[:1])["swa"], a.stats["skipped_pages"]]

    # A fresh instance: fresh pools, a different placement; finds the prefixes every pool can restore.
    b_kv, b_swa, b_mamba = MHAHostPool(2, "layer_first"), MHAHostPool(3, "page_first"), MambaHostPool(2)
    b = backend(ns)
    attach(b, b_kv, {PoolName.SWA: b_swa, PoolName.MAMBA: b_mamba})
    out["exists_after"] = exists(b, keys)
    out["exists_at_4"] = exists(b, keys[:4])
    out["exists_at_5"] = exists(b, keys[:5])  # no Mamba state stored at page 5: back to 4
    b_slots = [20 + p for p in range(PAGES)]
    out["get_v1"] = b.batch_get_v1(keys, b_kv.indices(b_slots))
    got = b.batch_get_v2(
        [transfer(PoolName.SWA, b_swa, keys[4:], [24, 25]), transfer(PoolName.MAMBA, b_mamba, keys[5:], [2])]
    )
    out["get_v2"] = {str(k): v for k, v in got.items()}
    out["kv_equal"] = all(torch.equal(a_kv.page(p), b_kv.page(20 + p)) for p in range(PAGES))
    out["swa_equal"] = all(torch.equal(a_swa.page(p), b_swa.page(20 + p)) for p in (4, 5))
    out["mamba_equal"] = all(
        torch.equal(x, y) for x, y in zip(a_mamba.page(15), b_mamba.page(2), strict=True)
    )
    out["swa_untouched_outside_window"] = not b_swa.kv_buffer[:, 20 * PAGE : 24 * PAGE].any().item()

    # A KV pool in another layout holds the same bytes in another order: a miss, never wrong bytes.
    c = backend(ns)
    attach(c, MHAHostPool(2, "page_first"), {PoolName.SWA: b_swa, PoolName.MAMBA: b_mamba})
    out["exists_other_kv_layout"] = exists(c, keys)

    # One pool's piece gone: that page's prefixes stop counting. Another prompt, saved by A and never
    # read (a read leases its objects), its pieces removed by their keys in the documented scheme.
    other = page_keys([(i * 31 + 11) % 30000 for i in range(PAGES * PAGE)], PAGE)
    a.batch_set_v2(
        [transfer(PoolName.SWA, a_swa, other, slots), transfer(PoolName.MAMBA, a_mamba, other[5:], [15])]
    )
    a.batch_set_v1(other, a_kv.indices(slots))
    out["other_exists"] = exists(b, other)
    store = Store.connect()
    try:
        store.remove(f"{ns}/swa.page_first/{other[4]}#0of1")  # in the SWA window before the cut at 6
        out["exists_without_swa_5"] = exists(b, other)
        out["get_without_swa_5"] = b.batch_get_v2([transfer(PoolName.SWA, b_swa, other[4:5], [30])])["swa"]
        store.remove(f"{ns}/kv.layer_first/{other[1]}#0of1")  # a KV page: the run stops before it
        out["exists_without_kv_2"] = exists(b, other)
        out["v1_exists_without_kv_2"] = b.batch_exists(other)
    finally:
        store.close()
    for storage in (a, b, c):
        storage.close()


def mla_with_mamba(out: dict[str, object], keys: list[str], ns: str) -> None:
    """MLA KV (rank-replicated: the writer rank stores it once) + Mamba state (sharded by TP rank)."""
    gen = torch.Generator().manual_seed(9)
    writers = []
    for rank in (0, 1):
        kv, mamba = MLAHostPool(2), MambaHostPool(2)
        randomize(gen, kv.kv_buffer, mamba.temporal_buffer, *mamba.conv_buffer)
        storage = backend(ns, mla=True, tp_rank=rank, tp_size=2)
        attach(storage, kv, {PoolName.MAMBA: mamba})
        writers.append((storage, kv, mamba))
    reader_kv, reader_mamba = MLAHostPool(2), MambaHostPool(2)
    reader = backend(ns, mla=True, tp_rank=1, tp_size=2)
    attach(reader, reader_kv, {PoolName.MAMBA: reader_mamba})
    window = [PoolTransfer(name=PoolName.MAMBA, keys=keys[-1:], hit_policy=PoolHitPolicy.TRAILING_PAGES)]
    slots = list(range(PAGES))
    storage1, kv1, mamba1 = writers[1]
    out["mla_rank1_set"] = [
        storage1.batch_set_v2([transfer(PoolName.MAMBA, mamba1, keys[-1:], [5])])["mamba"],
        storage1.batch_set_v1(keys, kv1.indices(slots)),  # not the writer: nothing stored
    ]
    out["mla_exists_rank1_state_only"] = reader.batch_exists_v2(keys, window).kv_hit_pages
    storage0, kv0, mamba0 = writers[0]
    storage0.batch_set_v2([transfer(PoolName.MAMBA, mamba0, keys[-1:], [5])])
    out["mla_rank0_set_v1"] = storage0.batch_set_v1(keys, kv0.indices(slots))
    result = reader.batch_exists_v2(keys, window)
    out["mla_exists_rank1"] = [result.kv_hit_pages, result.restorable_prefix_pages]
    out["mla_get_rank1"] = [
        reader.batch_get_v1(keys, reader_kv.indices(slots)),
        reader.batch_get_v2([transfer(PoolName.MAMBA, reader_mamba, keys[-1:], [9])])["mamba"],
    ]
    out["mla_kv_equal_writer"] = all(torch.equal(kv0.page(p), reader_kv.page(p)) for p in slots)
    out["mla_mamba_equal_own_rank"] = all(
        torch.equal(x, y) for x, y in zip(mamba1.page(5), reader_mamba.page(9), strict=True)
    )
    for storage in [reader, *(w[0] for w in writers)]:
        storage.close()


def main() -> None:
    tokens = [(i * 17 + 3) % 30000 for i in range(PAGES * PAGE)]
    keys = page_keys(tokens, PAGE)
    out: dict[str, object] = {"pages": len(keys), "real_pool_import_error": real_pool_import_error()}
    hybrid(out, keys, "sglang-v2-hybrid")
    mla_with_mamba(out, keys, "sglang-v2-mla")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
