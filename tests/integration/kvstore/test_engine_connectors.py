"""The engine connectors (vLLM, SGLang, LMCache) against a real store, with small stand-ins of the
engines' interfaces (tests/helpers/engine_standins: the names the connectors import, with the real
signatures). The real engines run the same connectors in the `engines` tier (tests/engines)."""

from __future__ import annotations

import asyncio
import importlib
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kvstore import Store
from kvstore.blocks import member_key
from kvstore.errors import InvalidArgumentError, NotSupportedError

STANDINS = Path(__file__).resolve().parents[2] / "helpers" / "engine_standins"
BLOCK = 16
LAYERS = ["layers.0.attn", "layers.1.attn"]


@pytest.fixture(scope="module")
def engines() -> Iterator[None]:
    """The stand-in engine packages on sys.path (never shadowing a real install: none is in this env)."""
    for name in ("vllm", "sglang", "lmcache"):
        if importlib.util.find_spec(name) is not None and name not in sys.modules:
            pytest.skip(f"a real {name} is installed here; the engines tier tests it")
    sys.path.insert(0, str(STANDINS))
    yield
    sys.path.remove(str(STANDINS))
    for name in list(sys.modules):
        ours = name.startswith("kvstore.integrations.") and name != "kvstore.integrations.mooncake"
        if ours or name.split(".")[0] in ("vllm", "sglang", "lmcache"):
            del sys.modules[name]


@pytest.fixture(scope="module")
def store(engines: None) -> Iterator[Store]:
    with Store.embedded(segment_size="64MiB") as s:
        yield s


# -- vLLM --------------------------------------------------------------------------------------------
class FullAttentionSpec:  # the spec class name is what the connector checks
    block_size = BLOCK
    num_kv_heads = 2
    head_size = 8
    dtype = "float32"


class CrossAttentionSpec(FullAttentionSpec):  # a kind the connector has no rule for (encoder-decoder models)
    pass


def vllm_config(master: str, namespace: str, **extra: Any) -> SimpleNamespace:
    return SimpleNamespace(
        kv_transfer_config=SimpleNamespace(
            kv_connector_extra_config={"master": master, "namespace": namespace, **extra}
        ),
        cache_config=SimpleNamespace(block_size=BLOCK),
        model_config=SimpleNamespace(model="tiny"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, rank=0),
    )


def kv_config(spec: type = FullAttentionSpec) -> SimpleNamespace:
    return SimpleNamespace(kv_cache_groups=[SimpleNamespace(layer_names=LAYERS, kv_cache_spec=spec())])


class VllmInstance:
    """A scheduler-side and a worker-side connector over numpy KV caches in vLLM's CPU layout."""

    def __init__(self, master: str, namespace: str, spec: type = FullAttentionSpec) -> None:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        from kvstore.integrations.vllm import KVStoreConnector

        config, kv = vllm_config(master, namespace), kv_config(spec)
        self.scheduler = KVStoreConnector(config, KVConnectorRole.SCHEDULER, kv)
        self.worker = KVStoreConnector(config, KVConnectorRole.WORKER, kv)
        self.caches = {n: np.full((32, 2, BLOCK, 16), np.nan, dtype=np.float32) for n in LAYERS}
        self.worker.register_kv_caches(self.caches)

    def compute(self, blocks: list[int], tokens: list[int], start: int) -> None:
        for li, name in enumerate(LAYERS):
            for pos in range(start, len(tokens)):
                self.caches[name][blocks[pos // BLOCK], :, pos % BLOCK, :] = tokens[pos] * 100 + pos + li / 10

    def step(self, req_id: str, tokens: list[int], blocks: list[int], computed: int) -> Any:
        output = SimpleNamespace(
            scheduled_new_reqs=[
                SimpleNamespace(
                    req_id=req_id, prompt_token_ids=tokens, block_ids=(blocks,), num_computed_tokens=computed
                )
            ],
            scheduled_cached_reqs=SimpleNamespace(
                req_ids=[], resumed_req_ids=set(), new_block_ids=[], num_computed_tokens=[]
            ),
            num_scheduled_tokens={req_id: len(tokens) - computed},
            finished_req_ids=set(),
        )
        meta = self.scheduler.build_connector_meta(output)
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        for name in LAYERS:
            self.worker.wait_for_layer_load(name)
        errors = self.worker.get_block_ids_with_load_errors()
        self.compute(blocks, tokens, computed)
        self.worker.wait_for_save()
        self.worker.clear_connector_metadata()
        return meta, errors

    def finish(self, req_id: str) -> bool:
        delay, _ = self.scheduler.request_finished_all_groups(SimpleNamespace(request_id=req_id), ([],))
        deadline = time.monotonic() + 10
        while delay and time.monotonic() < deadline:
            done, _ = self.worker.get_finished({req_id})
            if done:
                return True
            time.sleep(0.01)
        return False

    def block_bytes(self, blocks: list[int]) -> list[bytes]:
        return [b"".join(self.caches[n][b].tobytes() for n in LAYERS) for b in blocks]


def prompt(n_tokens: int, seed: int) -> list[int]:
    return [int(x) for x in np.random.default_rng(seed).integers(5, 30000, n_tokens)]


def test_vllm_prefix_saved_by_one_instance_is_loaded_by_another(store: Store) -> None:
    a = VllmInstance(store.master_address, "vllm-share")
    tokens_a = prompt(4 * BLOCK, 1)
    req = SimpleNamespace(request_id="a", prompt_token_ids=tokens_a)
    assert a.scheduler.get_num_new_matched_tokens(req, 0) == (0, False)
    meta, _ = a.step("a", tokens_a, [3, 9, 4, 7], 0)
    assert [len(m) for m in meta.saves] == [4] and not meta.loads
    assert a.finish("a")  # blocks stay pinned until the save is done, then are released

    b = VllmInstance(store.master_address, "vllm-share")
    tokens_b = tokens_a[: 3 * BLOCK] + prompt(BLOCK + 3, 2)
    req_b = SimpleNamespace(request_id="b", prompt_token_ids=tokens_b)
    assert b.scheduler.get_num_new_matched_tokens(req_b, 0) == (3 * BLOCK, False)
    b.scheduler.update_state_after_alloc(req_b, None, 3 * BLOCK)
    meta, errors = b.step("b", tokens_b, [0, 1, 2, 5, 6], 3 * BLOCK)
    assert [len(m) for m in meta.loads] == [3] and meta.loads[0].block_ids == [0, 1, 2]
    assert [len(m) for m in meta.saves] == [1]  # only its own 4th block
    assert not errors
    assert b.block_bytes([0, 1, 2]) == a.block_bytes([3, 9, 4])
    stats = b.worker.get_kv_connector_stats()
    assert stats is not None and stats.data["loaded_blocks"] == 3 * 2  # a member per KV head
    assert b.finish("b")


def test_vllm_a_block_that_fails_to_load_is_reported_not_used(store: Store) -> None:
    a = VllmInstance(store.master_address, "vllm-fail")
    tokens = prompt(3 * BLOCK + 1, 3)
    a.scheduler.get_num_new_matched_tokens(SimpleNamespace(request_id="a", prompt_token_ids=tokens), 0)
    a.step("a", tokens, [0, 1, 2, 3], 0)
    assert a.finish("a")
    b = VllmInstance(store.master_address, "vllm-fail")
    req = SimpleNamespace(request_id="b", prompt_token_ids=tokens)
    assert b.scheduler.get_num_new_matched_tokens(req, 0) == (3 * BLOCK, False)
    b.scheduler.update_state_after_alloc(req, None, 3 * BLOCK)
    tracked = b.scheduler.scheduler_side.requests["b"]
    second = b.scheduler.names.key(tracked.seqs[1], tracked.digests[1], 0, 0, 2)  # member 0 of 2 heads
    store.remove(second, force=True)  # evicted between lookup and load
    _, errors = b.step("b", tokens, [10, 11, 12, 13], 3 * BLOCK)
    assert errors == {11}  # vLLM recomputes (or fails) exactly that block, per kv_load_failure_policy


def test_vllm_dead_master_means_no_hits_and_dropped_saves(engines: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    inst = VllmInstance(dead, "vllm-dead")
    tokens = prompt(2 * BLOCK + 1, 4)
    req = SimpleNamespace(request_id="x", prompt_token_ids=tokens)
    assert inst.scheduler.get_num_new_matched_tokens(req, 0) == (0, False)
    inst.step("x", tokens, [0, 1, 2], 0)
    inst.worker.mover.drain()
    assert inst.worker.mover.stats.failed_saves == 2 * 2  # 2 blocks, a member per KV head


def test_vllm_supports_hma_and_stores_nothing_for_a_model_with_a_group_it_cannot_serve(store: Store) -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA

    from kvstore.integrations.vllm import KVStoreConnector

    assert issubclass(KVStoreConnector, SupportsHMA)
    inst = VllmInstance(store.master_address, "vllm-hybrid", spec=CrossAttentionSpec)
    tokens = prompt(3 * BLOCK, 5)
    assert inst.scheduler.get_num_new_matched_tokens(
        SimpleNamespace(request_id="h", prompt_token_ids=tokens), 0
    ) == (0, False)


def test_vllm_settings_come_from_kvstore_variables_and_bad_ones_are_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from kvstore.integrations.vllm import KVStoreConnector

    monkeypatch.setenv("KVSTORE_MASTER", store.master_address)
    monkeypatch.setenv("KVSTORE_NAMESPACE", "from-env")
    config = vllm_config("", "")
    config.kv_transfer_config.kv_connector_extra_config = {}
    connector = KVStoreConnector(config, KVConnectorRole.SCHEDULER, kv_config())
    assert connector.names.namespace == "from-env"
    assert connector.link.get() is not None and connector.link.get().master_address == store.master_address
    config.kv_transfer_config.kv_connector_extra_config = {"mastr": "x"}
    with pytest.raises(InvalidArgumentError, match="mastr"):
        KVStoreConnector(config, KVConnectorRole.SCHEDULER, kv_config())


def test_gpu_tensors_are_refused_with_a_clear_error(engines: None) -> None:
    from kvstore.integrations.paged import layer_geometry
    from transfer_engine import cuda

    if cuda.available():
        pytest.skip("a GPU is usable here: CUDA tensors are taken (test_gpu_store covers them)")

    class CudaTensor:
        device = SimpleNamespace(type="cuda")

        def data_ptr(self) -> int:
            return 1 << 40

    with pytest.raises(NotSupportedError, match="GPU"):
        layer_geometry("layer", CudaTensor())


def test_paged_cache_addresses_blocks_by_stride_and_refuses_blocks_outside() -> None:
    import numpy as np

    from kvstore.integrations.paged import PagedCache, layer_geometry

    shared = np.zeros((6, 2, 32), np.uint8)  # two layers interleaved in one allocation: stride 64
    alone = np.zeros((4, 16), np.uint16)
    cache = PagedCache(
        [layer_geometry("a", shared[:, 0]), layer_geometry("b", shared[:, 1]), layer_geometry("c", alone)]
    )
    base, other = shared.ctypes.data, alone.ctypes.data
    assert cache.many_buffers([[0, 0, 0], [5, 2, 3]]) == [
        [(base, 32), (base + 32, 32), (other, 32)],
        [(base + 5 * 64, 32), (base + 2 * 64 + 32, 32), (other + 3 * 32, 32)],
    ]
    assert cache.many_buffers([[5, 2, 3]]) == [cache.buffers([5, 2, 3])]
    assert len(cache.spans) == 2  # the interleaved layers register their allocation once
    with pytest.raises(InvalidArgumentError, match="block 4 outside layer c"):
        cache.many_buffers([[0, 0, 0], [1, 1, 4]])
    with pytest.raises(InvalidArgumentError, match="block -1 outside layer a"):
        cache.many_buffers([[-1, 0, 0]])
    with pytest.raises(InvalidArgumentError, match="per layer"):
        cache.many_buffers([[0, 0]])


# -- SGLang ------------------------------------------------------------------------------------------
PAGE, SG_LAYERS, HEADS, DIM, SIZE = 16, 3, 2, 8, 32 * 16


class MHAPool:
    """SGLang's MHA host pool contract, page_first: kv_buffer [2, tokens, layers, heads, dim]."""

    layout, page_size = "page_first", PAGE

    def __init__(self, seed: int) -> None:
        self.kv_buffer = (
            np.random.default_rng(seed).standard_normal((2, SIZE, SG_LAYERS, HEADS, DIM)).astype(np.float32)
        )

    def get_page_buffer_meta(self, indices: np.ndarray) -> tuple[list[int], list[int]]:
        item, base = 4, self.kv_buffer.ctypes.data
        v_offset = SG_LAYERS * SIZE * HEADS * DIM * item
        ptrs: list[int] = []
        for i in list(indices)[::PAGE]:
            k = base + int(i) * SG_LAYERS * HEADS * DIM * item
            ptrs += [k, k + v_offset]
        return ptrs, [SG_LAYERS * item * PAGE * HEADS * DIM] * len(ptrs)

    def page(self, p: int) -> bytes:
        return self.kv_buffer[:, p * PAGE : (p + 1) * PAGE].tobytes()


class MLAPool(MHAPool):
    def __init__(self, seed: int) -> None:
        self.kv_buffer = (
            np.random.default_rng(seed).standard_normal((SIZE, SG_LAYERS, 1, DIM)).astype(np.float32)
        )

    def get_page_buffer_meta(self, indices: np.ndarray) -> tuple[list[int], list[int]]:
        base = self.kv_buffer.ctypes.data
        ptrs = [base + int(i) * SG_LAYERS * DIM * 4 for i in list(indices)[::PAGE]]
        return ptrs, [SG_LAYERS * 4 * PAGE * DIM] * len(ptrs)

    def page(self, p: int) -> bytes:
        return self.kv_buffer[p * PAGE : (p + 1) * PAGE].tobytes()


class MambaPool:
    """SGLang's MambaPoolHost contract: page_size 1 (one state slot per page), each slot's temporal state
    then each conv state."""

    layout, page_size = "page_first", 1

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.temporal_buffer = rng.standard_normal((32, SG_LAYERS, 4, 8)).astype(np.float32)
        self.conv_buffer = [rng.standard_normal((32, SG_LAYERS, 3, 8)).astype(np.float32)]

    def get_page_buffer_meta(self, indices: np.ndarray) -> tuple[list[int], list[int]]:
        ptrs, sizes = [], []
        for slot in list(indices):
            for buf in (self.temporal_buffer, *self.conv_buffer):
                ptrs.append(buf.ctypes.data + int(slot) * buf[0].nbytes)
                sizes.append(buf[0].nbytes)
        return ptrs, sizes

    def page(self, slot: int) -> bytes:
        return b"".join(buf[slot].tobytes() for buf in (self.temporal_buffer, *self.conv_buffer))


def sglang_backend(
    master: str, pool: Any, *, mla: bool = False, tp_rank: int = 0, namespace: str | None = None
) -> Any:
    """kvstore's backend for one of two TP ranks, built from the dynamic factory's extra config, with
    `pool` as its KV host pool."""
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    from kvstore.integrations.sglang import KVStoreHiCacheStorage

    config = HiCacheStorageConfig(
        tp_rank, 2, 0, 1, 0, 1, mla, False, True, "tiny",
        extra_config={"backend_name": "kvstore", "module_path": "kvstore.integrations.sglang",
                      "class_name": "KVStoreHiCacheStorage", "interface_v1": 1, "master": master,
                      "namespace": namespace or f"sglang-{'mla' if mla else 'mha'}"},
    )  # fmt: skip
    backend = KVStoreHiCacheStorage(config, {})
    backend.register_mem_pool_host(pool)
    return backend


def test_sglang_mha_pages_per_rank_round_trip_and_skip_stored_pages(store: Store) -> None:
    """Each TP rank stores its shard of a page (K and V of every layer) as one object in sglang_keys'
    form; a page counts only once every rank's shard is stored; stored pages are skipped; each rank
    reads back its own bytes."""
    keys = [f"{i:064x}" for i in range(1, 5)]
    indices = np.arange(len(keys) * PAGE)
    written, read = [MHAPool(1), MHAPool(2)], [MHAPool(3), MHAPool(4)]  # [rank 0's heads, rank 1's]
    writers = [sglang_backend(store.master_address, pool, tp_rank=rank) for rank, pool in enumerate(written)]
    readers = [sglang_backend(store.master_address, pool, tp_rank=rank) for rank, pool in enumerate(read)]
    assert readers[0].batch_exists(keys) == 0
    assert writers[0].batch_set_v1(keys[:2], indices[: 2 * PAGE]) == [True, True]
    assert [r.batch_exists(keys) for r in readers] == [0, 0]  # rank 1's shards missing: no page is whole
    assert writers[1].batch_set_v1(keys[:2], indices[: 2 * PAGE]) == [True, True]
    assert [r.batch_exists(keys) for r in readers] == [2, 2]  # the leading run
    assert writers[0].batch_set_v1(keys, indices) == [True] * 4 and writers[0].stats["skipped_pages"] == 2
    assert writers[1].batch_set_v1(keys, indices) == [True] * 4
    for rank, pool in enumerate(written):
        assert store.get(member_key(f"sglang-mha/kv.page_first/{keys[0]}", rank, 2)) == pool.page(0)
    for reader, pool, source in zip(readers, read, written, strict=True):
        assert reader.batch_get_v1(keys, indices) == [True] * 4
        assert all(pool.page(p) == source.page(p) for p in range(4))
    assert readers[0].batch_get_v1([f"{99:064x}"], indices[:PAGE]) == [False]


def test_sglang_mla_pages_are_written_once_and_read_by_every_rank(store: Store) -> None:
    keys = [f"{i:064x}" for i in range(10, 13)]
    indices = np.arange(len(keys) * PAGE)
    writer_pool, reader_pool = MLAPool(4), MLAPool(5)
    writer = sglang_backend(store.master_address, writer_pool, mla=True, tp_rank=0)
    other = sglang_backend(store.master_address, MLAPool(6), mla=True, tp_rank=1)
    reader = sglang_backend(store.master_address, reader_pool, mla=True, tp_rank=1)
    assert (
        other.batch_set_v1(keys, indices) == [True] * 3 and reader.batch_exists(keys) == 0
    )  # not the writer
    assert writer.batch_set_v1(keys, indices) == [True] * 3
    assert reader.batch_exists(keys) == 3 and reader.batch_get_v1(keys, indices) == [True] * 3
    assert all(writer_pool.page(p) == reader_pool.page(p) for p in range(3))
    # One object for every rank: the group has a single member.
    assert store.get(member_key(f"sglang-mla/kv.page_first/{keys[0]}", 0, 1)) == writer_pool.page(0)


def test_sglang_plain_interface_moves_flat_pages(store: Store) -> None:
    ranks = [sglang_backend(store.master_address, MHAPool(7), tp_rank=rank) for rank in (0, 1)]
    pages = [[np.random.default_rng(10 * r + i).standard_normal(64).astype(np.float32) for i in range(3)]
             for r in (0, 1)]  # fmt: skip
    keys = [f"{i:064x}" for i in range(20, 23)]
    assert ranks[0].batch_set(keys, pages[0])
    empty = [np.zeros(64, np.float32) for _ in keys]
    assert ranks[0].batch_get(keys, empty) == [None] * 3  # rank 1's shards missing: no page is whole
    assert ranks[1].batch_set(keys, pages[1])
    for backend, mine in zip(ranks, pages, strict=True):
        got = backend.batch_get(keys, [np.zeros(64, np.float32) for _ in keys])
        assert all(g is not None and np.array_equal(g, p) for g, p in zip(got, mine, strict=True))
    assert ranks[0].batch_get([f"{77:064x}"], [np.zeros(64, np.float32)]) == [None]
    assert ranks[0].exists(keys[0])
    assert ranks[0].batch_exists(keys) == 0  # flat pages are a format of their own: never read as v1 pages


def hybrid_rank(master: str, rank: int, seed: int) -> tuple[Any, MHAPool, MHAPool, MambaPool]:
    """One TP rank of a hybrid model: the full-attention KV pool (anchor), an SWA pool and Mamba state,
    attached as SGLang's HybridCacheController attaches them."""
    from sglang.srt.mem_cache.hicache_storage import PoolName

    kv, swa, mamba = MHAPool(seed), MHAPool(seed + 1), MambaPool(seed + 2)
    backend = sglang_backend(master, kv, tp_rank=rank, namespace="sglang-hybrid")
    for name, pool in ((PoolName.KV, kv), (PoolName.SWA, swa), (PoolName.MAMBA, mamba)):
        backend.register_mem_host_pool_v2(pool, name)
    backend.on_host_pools_registered()
    return backend, kv, swa, mamba


def test_sglang_v2_hybrid_counts_a_stop_only_when_every_rank_of_every_pool_has_it(store: Store) -> None:
    """v2 at TP=2: SWA (a trailing window of 2 pages) and Mamba state (the last page) beside the KV pool; a
    prefix is restorable only where each pool's group of both ranks' shards is whole; loads are
    byte-exact per rank."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    def lookups(upto: int) -> list[PoolTransfer]:
        trailing = PoolHitPolicy.TRAILING_PAGES
        return [PoolTransfer(PoolName.SWA, keys=keys[upto - 2 : upto], hit_policy=trailing),
                PoolTransfer(PoolName.MAMBA, keys=keys[upto - 1 : upto], hit_policy=trailing)]  # fmt: skip

    keys = [f"{i:064x}" for i in range(30, 36)]
    pages = np.arange(6 * PAGE)
    writers = [hybrid_rank(store.master_address, rank, 40 + 10 * rank) for rank in (0, 1)]
    for rank, (backend, *_) in enumerate(writers):
        states = [3, 5] if rank == 0 else [5]  # Mamba state slots = pages; rank 1 leaves out page 4's
        sides = [
            PoolTransfer(PoolName.SWA, host_indices=pages, keys=keys),
            PoolTransfer(PoolName.MAMBA, host_indices=np.array(states), keys=[keys[p] for p in states]),
        ]
        assert backend.batch_set_v2(sides) == {"swa": [True] * 6, "mamba": [True] * len(states)}
        assert backend.batch_set_v1(keys, pages) == [True] * 6
    reader, kv, swa, mamba = hybrid_rank(store.master_address, 0, 90)
    found = reader.batch_exists_v2(keys, lookups(6))
    assert (found.kv_hit_pages, found.restorable_prefix_pages) == (6, [6])  # page 4's state is half there
    assert reader.batch_exists_v2(keys[:4], lookups(4)).kv_hit_pages == 0
    writers[1][0].batch_set_v2([PoolTransfer(PoolName.MAMBA, host_indices=np.array([3]), keys=keys[3:4])])
    assert reader.batch_exists_v2(keys[:4], lookups(4)).restorable_prefix_pages == [4]
    loads = [PoolTransfer(PoolName.SWA, host_indices=pages[4 * PAGE :], keys=keys[4:]),
             PoolTransfer(PoolName.MAMBA, host_indices=np.array([7]), keys=keys[5:])]  # fmt: skip
    outside_window = swa.kv_buffer[:, : 4 * PAGE].copy()
    assert reader.batch_get_v1(keys, pages) == [True] * 6
    assert reader.batch_get_v2(loads) == {"swa": [True, True], "mamba": [True]}
    _, kv0, swa0, mamba0 = writers[0]
    assert all(kv.page(p) == kv0.page(p) for p in range(6))
    assert all(swa.page(p) == swa0.page(p) for p in (4, 5))
    assert np.array_equal(swa.kv_buffer[:, : 4 * PAGE], outside_window)  # SWA pages 1-4: not loaded
    assert mamba.page(7) == mamba0.page(5)


# -- LMCache -----------------------------------------------------------------------------------------
class ChunkKey:
    def __init__(self, chunk_hash: int) -> None:
        self.chunk_hash = chunk_hash

    def to_string(self) -> str:
        return f"tiny@1@0@{self.chunk_hash:x}@float32"


class LocalCPU:
    """LMCache's LocalCPUBackend allocation contract: memory objects with a byte_array."""

    def __init__(self) -> None:
        self.freed = 0

    def allocate(self, shapes: Any, dtypes: Any, fmt: Any) -> Any:
        size = sum(int(np.prod(s)) * d.itemsize for s, d in zip(shapes, dtypes, strict=True))
        obj = SimpleNamespace(byte_array=bytearray(size), valid_bytes=size)
        obj.ref_count_down = lambda: setattr(self, "freed", self.freed + 1)
        return obj


def lmcache_connector(url: str) -> Any:
    from lmcache.v1.storage_backend.connector import ConnectorContext

    from kvstore.integrations.lmcache import KVStoreConnectorAdapter

    metadata = SimpleNamespace(
        get_shapes=lambda: [(2, 2, 256, 16)],
        get_dtypes=lambda: [np.dtype(np.float32)],
        chunk_size=256,
        model_name="tiny",
    )
    config = SimpleNamespace(
        extra_config={"save_chunk_meta": False, "remote_storage_plugin.kvstore.namespace": "lmc"}
    )
    adapter = KVStoreConnectorAdapter()
    assert adapter.can_parse(url) and adapter.can_parse("plugin://kvstore.primary")
    loop = asyncio.new_event_loop()
    context = ConnectorContext(url, loop, LocalCPU(), config, metadata, plugin_name="kvstore")
    return adapter.create_connector(context)


def test_lmcache_adapter_round_trips_chunks(store: Store) -> None:
    connector = lmcache_connector(f"kvstore://{store.master_address}")
    loop = connector.loop
    chunk = SimpleNamespace(byte_array=bytearray(np.arange(2 * 2 * 256 * 16, dtype=np.float32).tobytes()))
    keys = [ChunkKey(1), ChunkKey(2)]
    loop.run_until_complete(connector.put(keys[0], chunk))
    assert connector.batched_contains(keys) == 1 and loop.run_until_complete(connector.exists(keys[0]))
    got = loop.run_until_complete(connector.get(keys[0]))
    assert got is not None and bytes(got.byte_array) == bytes(chunk.byte_array)
    assert loop.run_until_complete(connector.get(keys[1])) is None
    assert connector.local_cpu_backend.freed == 1  # the miss gave its buffer back
    assert connector.remove_sync(keys[0]) and not connector.exists_sync(keys[0])
    loop.run_until_complete(connector.close())
    loop.close()
