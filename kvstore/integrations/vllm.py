"""vLLM KV connector: prefix KV blocks shared through kvstore, across vLLM instances and restarts.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KVStoreConnector",
        "kv_connector_module_path": "kvstore.integrations.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"master": "10.0.0.1:50051"}}'

Extra config keys (each falls back to its KVSTORE_* variable, so every worker can be configured by
environment alone): master, namespace, replicas, transport.

How it works. The scheduler side asks the store which leading blocks of a prompt exist (one batch_exists
over every TP rank's key; no worker round trip) and plans loads of the blocks vLLM did not find locally and
saves of the prompt's full blocks the store lacks. The worker side registers each KV allocation with the
store once and moves one object per (namespace, rank, block) holding that block of every layer, straight
from and into vLLM's cache tensors (no copy). Loads start in start_load_kv on a background thread and
wait_for_layer_load waits for them; saves are submitted in wait_for_save and run while the next step
computes; a finished request's blocks stay pinned (request_finished returns True) until its saves are done.

Failures never feed wrong KV: a block that fails to load (miss, checksum, dead node) is reported through
get_block_ids_with_load_errors, and vLLM recomputes it or fails the request as kv_load_failure_policy says.
With the master down, lookups find nothing and saves are dropped: vLLM computes as if the store were empty.

Limits: KV cache groups other than full attention (sliding window, Mamba) are not stored: a hybrid model
runs (the connector supports HMA) but gets no external hits. CUDA KV caches move through page-locked
host staging (kvstore.client.gpu_buffers: verified there before any byte reaches the GPU); vLLM's CPU
backend is the path CI runs, the CUDA one runs in the `gpu` tests on a GPU machine.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

from kvstore.blocks import BlockHasher
from kvstore.errors import KVStoreError
from kvstore.integrations.paged import (
    Batch,
    BlockMover,
    MoveStats,
    PagedCache,
    StoreLink,
    ceil_blocks,
    full_blocks,
    layer_geometry,
    leading_run,
    store_settings,
)

log = logging.getLogger("kvstore.vllm")


# -- metadata (scheduler -> workers) --------------------------------------------------------------------
@dataclass
class BlockMove:
    """Blocks of one request to load or save: their hashes and, per KV cache group, their block ids."""

    req_id: str
    hashes: list[str]
    block_ids: list[list[int]]  # [group][i]: where hashes[i] lives in that group


@dataclass
class KVStoreConnectorMetadata(KVConnectorMetadata):
    loads: list[BlockMove] = field(default_factory=list)
    saves: list[BlockMove] = field(default_factory=list)


class KVStoreConnectorStats(KVConnectorStats):
    """kvstore's counters in vLLM's connector stats (summed over workers and steps)."""

    def reset(self) -> None:
        self.data: dict[str, Any] = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for name, value in other.data.items():
            self.data[name] = self.data.get(name, 0) + value
        return self

    def reduce(self) -> dict[str, int | float]:
        out: dict[str, int | float] = dict(self.data)
        for kind, moved in (("load", "loaded_bytes"), ("save", "saved_bytes")):
            seconds = self.data.get(f"{kind}_seconds", 0.0)
            if seconds > 0:
                out[f"{kind}_GBps"] = round(self.data.get(moved, 0) / seconds / 1e9, 3)
        return out

    def is_empty(self) -> bool:
        return not any(self.data.values())


# -- what both sides agree on ---------------------------------------------------------------------------
def _attention_layers(kv_cache_config: Any) -> tuple[list[str], list[int], bool]:
    """(layer names in a fixed order, each layer's group, every group full attention)."""
    names: list[str] = []
    groups: list[int] = []
    all_full = True
    for g, group in enumerate(getattr(kv_cache_config, "kv_cache_groups", []) or []):
        spec = group.kv_cache_spec
        if type(spec).__name__ not in ("FullAttentionSpec", "MLAAttentionSpec"):
            all_full = False
        for name in group.layer_names:
            names.append(name)
            groups.append(g)
    return names, groups, all_full


def _default_namespace(vllm_config: Any, kv_cache_config: Any) -> str:
    """Model + KV layout: two deployments share blocks only when their KV bytes mean the same."""
    model = getattr(getattr(vllm_config, "model_config", None), "model", "model")
    layout = []
    for group in getattr(kv_cache_config, "kv_cache_groups", []) or []:
        spec = group.kv_cache_spec
        layout.append(
            (
                type(spec).__name__,
                getattr(spec, "block_size", None),
                getattr(spec, "num_kv_heads", None),
                getattr(spec, "head_size", None),
                str(getattr(spec, "dtype", "")),
                tuple(group.layer_names),
            )
        )
    digest = hashlib.sha256(repr((model, layout)).encode()).hexdigest()[:16]
    return f"vllm:{model}:{digest}"


def _rank_suffixes(vllm_config: Any) -> tuple[list[str], str]:
    """Key suffixes of every TP rank (the scheduler checks all) and of this process's rank."""
    parallel = getattr(vllm_config, "parallel_config", None)
    tp = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
    pp = int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
    rank = int(getattr(parallel, "rank", 0) or 0)
    pp_rank, tp_rank = divmod(rank, tp)
    pp_ranks = range(pp) if pp > 1 else [0]
    suffixes = [f"@{t}.{tp}" + (f"/{p}.{pp}" if pp > 1 else "") for p in pp_ranks for t in range(tp)]
    mine = f"@{tp_rank}.{tp}" + (f"/{pp_rank}.{pp}" if pp > 1 else "")
    return suffixes, mine


# -- scheduler side -------------------------------------------------------------------------------------
@dataclass
class _Tracked:
    """A request the scheduler side follows from lookup to finish."""

    hashes: list[str]  # the prompt's full blocks
    stored: int  # leading blocks the store held at lookup
    local_blocks: int = 0  # leading blocks vLLM had itself
    load: tuple[int, int] | None = None  # block range to load
    block_ids: list[list[int]] = field(default_factory=list)
    saved: int = 0  # blocks whose save has been scheduled (or that need none)
    saves_scheduled: bool = False


class _SchedulerSide:
    def __init__(self, connector: KVStoreConnector) -> None:
        self.c = connector
        self.requests: dict[str, _Tracked] = {}
        self.pending = KVStoreConnectorMetadata()

    def matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        c = self.c
        tokens = list(getattr(request, "prompt_token_ids", None) or [])
        if not c.active or not tokens:
            return 0, False
        known = self.requests.get(request.request_id)  # asked again while it waits: same prompt, same keys
        if known is not None and len(known.hashes) == full_blocks(len(tokens), c.block_size):
            hashes = known.hashes
        else:
            hashes = c.hasher.keys(tokens)
        usable = full_blocks(len(tokens) - 1, c.block_size)  # vLLM computes at least one token
        stored = self._stored_run(hashes[:usable])
        tracked = _Tracked(hashes, stored, local_blocks=full_blocks(num_computed_tokens, c.block_size))
        tracked.saved = stored
        self.requests[request.request_id] = tracked
        extra = max(0, stored - tracked.local_blocks) * c.block_size
        return extra, False

    def _stored_run(self, hashes: list[str]) -> int:
        if not hashes:
            return 0
        store = self.c.link.get()
        if store is None:
            return 0
        keys = [h + s for h in hashes for s in self.c.all_suffixes]
        try:
            present = store.batch_exists(keys)
        except KVStoreError as exc:
            log.warning("kvstore lookup failed (%s): treating as a miss", exc)
            return 0
        run = leading_run(present, len(self.c.all_suffixes))
        self.c.mover.count_lookup(run)
        return run

    def after_alloc(self, request: Any, num_external_tokens: int) -> None:
        tracked = self.requests.get(request.request_id)
        if tracked is None or num_external_tokens <= 0:
            return
        first = tracked.local_blocks
        tracked.load = (
            first,
            min(first + ceil_blocks(num_external_tokens, self.c.block_size), tracked.stored),
        )

    def build_meta(self, scheduler_output: Any) -> KVStoreConnectorMetadata:
        meta, self.pending = self.pending, KVStoreConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            tracked = self.requests.get(new.req_id)
            if tracked is None:
                continue
            tracked.block_ids = [list(ids) for ids in new.block_ids]
            if tracked.load is not None:
                first, end = tracked.load
                meta.loads.append(self._move(new.req_id, tracked, first, end))
                tracked.load = None
            self._plan_save(meta, new.req_id, tracked, new.num_computed_tokens + scheduled.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            tracked = self.requests.get(req_id)
            if tracked is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                tracked.block_ids = [list(ids) for ids in (new_ids or [])]
            elif new_ids is not None:
                for group, ids in enumerate(new_ids):
                    tracked.block_ids[group].extend(ids)
            self._plan_save(meta, req_id, tracked, cached.num_computed_tokens[i] + scheduled.get(req_id, 0))
        return meta

    def _plan_save(
        self, meta: KVStoreConnectorMetadata, req_id: str, tracked: _Tracked, computed: int
    ) -> None:
        end = min(len(tracked.hashes), full_blocks(computed, self.c.block_size))
        end = min(end, min((len(ids) for ids in tracked.block_ids), default=0))
        if end > tracked.saved:
            meta.saves.append(self._move(req_id, tracked, tracked.saved, end))
            tracked.saved = end
            tracked.saves_scheduled = True

    @staticmethod
    def _move(req_id: str, tracked: _Tracked, first: int, end: int) -> BlockMove:
        return BlockMove(req_id, tracked.hashes[first:end], [ids[first:end] for ids in tracked.block_ids])

    def finished(self, request: Any) -> tuple[bool, dict[str, Any] | None]:
        tracked = self.requests.pop(request.request_id, None)
        # Saves still in flight read these blocks: keep them until the workers say the saves are done.
        return (tracked is not None and tracked.saves_scheduled), None


# -- worker side ----------------------------------------------------------------------------------------
class _WorkerSide:
    def __init__(self, connector: KVStoreConnector) -> None:
        self.c = connector
        self.cache: PagedCache | None = None
        self.layer_groups: list[int] = []
        self._load: Future[list[bool]] | None = None
        self._load_blocks: list[list[int]] = []  # per loaded key: its block id in each group
        self._load_errors: set[int] = set()
        self._saves: dict[str, list[Future[list[bool]]]] = {}
        self._finishing: set[str] = set()
        self._lock = threading.Lock()

    def register(self, kv_caches: dict[str, Any]) -> None:
        names, groups, _ = _attention_layers(self.c.kv_cache_config)
        order = [(n, g) for n, g in zip(names, groups, strict=True) if n in kv_caches]
        if not order:  # no config (or names differ): every layer, in the engine's own order
            order = [(n, 0) for n in kv_caches]
        self.cache = PagedCache([layer_geometry(n, kv_caches[n]) for n, _ in order])
        self.layer_groups = [g for _, g in order]
        store = self.c.link.get()
        if store is not None:
            self.cache.register(store)

    def _batch(self, moves: Sequence[BlockMove]) -> Batch:
        assert self.cache is not None, "register_kv_caches was not called"
        store = self.c.link.get()
        if store is not None:
            self.cache.register(store)  # no-op once done; after a late connection it registers now
        batch = Batch()
        rows = []
        for move in moves:
            for i, block_hash in enumerate(move.hashes):
                per_group = [ids[i] for ids in move.block_ids]
                rows.append([per_group[g] for g in self.layer_groups])
                batch.keys.append(block_hash + self.c.my_suffix)
                batch.tags.append((move.req_id, per_group))
        batch.pieces = self.cache.many_pieces(rows)
        return batch

    def start_load(self, meta: KVStoreConnectorMetadata) -> None:
        if not meta.loads:
            return
        batch = self._batch(meta.loads)
        self._load_blocks = [per_group for _, per_group in batch.tags]
        self._load = self.c.mover.load(batch)

    def wait_load(self) -> None:
        if self._load is None:
            return
        ok = self._load.result()
        self._load = None
        for good, per_group in zip(ok, self._load_blocks, strict=True):
            if not good:
                self._load_errors.update(per_group)
        self._load_blocks = []

    def load_errors(self) -> set[int]:
        self.wait_load()
        errors, self._load_errors = self._load_errors, set()
        return errors

    def save(self, meta: KVStoreConnectorMetadata) -> None:
        self.wait_load()  # a step's loads are done before its saves are read
        if not meta.saves:
            return
        future = self.c.mover.save(self._batch(meta.saves))
        with self._lock:
            for req_id in {move.req_id for move in meta.saves}:
                self._saves.setdefault(req_id, []).append(future)

    def finished(self, finished_req_ids: set[str]) -> set[str] | None:
        with self._lock:
            self._finishing |= {r for r in finished_req_ids if r in self._saves}
            done = {r for r in self._finishing if all(f.done() for f in self._saves[r])}
            for r in done:
                self._finishing.discard(r)
                del self._saves[r]
        return done or None

    def drain(self) -> None:
        """Every save submitted so far is done (before blocks of preempted requests are reused)."""
        self.c.mover.drain()


# -- the connector ----------------------------------------------------------------------------------------
class KVStoreConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.kv_cache_config = kv_cache_config
        extra = dict(getattr(self._kv_transfer_config, "kv_connector_extra_config", None) or {})
        settings = store_settings(extra)
        replicas = settings.get("replicas")
        self.link = StoreLink(settings)
        self.block_size = int(vllm_config.cache_config.block_size)
        _, _, all_full = _attention_layers(kv_cache_config)
        self.active = all_full
        if not all_full:
            log.warning("kvstore connector: a KV cache group is not full attention; no blocks are stored")
        namespace = self.link.namespace() or _default_namespace(vllm_config, kv_cache_config)
        self.hasher = BlockHasher(self.block_size, namespace)
        self.all_suffixes, self.my_suffix = _rank_suffixes(vllm_config)
        self.mover = BlockMover(self.link, int(replicas) if replicas is not None else None)
        self.scheduler_side = _SchedulerSide(self) if role == KVConnectorRole.SCHEDULER else None
        self.worker_side = _WorkerSide(self) if role == KVConnectorRole.WORKER else None

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a dropped save is a later miss, never a wrong answer

    # -- scheduler side
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        assert self.scheduler_side is not None
        return self.scheduler_side.matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self.scheduler_side is not None
        self.scheduler_side.after_alloc(request, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        assert self.scheduler_side is not None
        return self.scheduler_side.build_meta(scheduler_output)

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        assert self.scheduler_side is not None
        return self.scheduler_side.finished(request)

    def request_finished_all_groups(
        self, request: Any, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        assert self.scheduler_side is not None
        return self.scheduler_side.finished(request)

    # -- worker side
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        assert self.worker_side is not None
        self.worker_side.register(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        assert self.worker_side is not None
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVStoreConnectorMetadata)
        self.worker_side.start_load(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        # One object holds a block of every layer, so the first layer waits for the whole load; the
        # load ran while vLLM prepared the step.
        if self.worker_side is not None:
            self.worker_side.wait_load()

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        return  # blocks are saved whole (every layer) in wait_for_save, after the forward pass

    def wait_for_save(self) -> None:
        assert self.worker_side is not None
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVStoreConnectorMetadata)
        self.worker_side.save(meta)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        if self.worker_side is None:
            return None, None
        return self.worker_side.finished(finished_req_ids), None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker_side.load_errors() if self.worker_side is not None else set()

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        if self.worker_side is not None:
            self.worker_side.drain()

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        stats = self.mover.take_stats()
        if not any(vars(stats).values()):
            return None
        return KVStoreConnectorStats(data=dict(vars(stats)))

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return KVStoreConnectorStats(data=dict(data or {}))

    def shutdown(self) -> None:
        self.mover.close()
        store = self.link.current()
        if store is not None and self.worker_side is not None and self.worker_side.cache is not None:
            self.worker_side.cache.unregister(store)
        self.link.close()


__all__ = ["KVStoreConnector", "KVStoreConnectorMetadata", "KVStoreConnectorStats", "MoveStats"]
