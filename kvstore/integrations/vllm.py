"""vLLM KV connector: prefix KV blocks shared through kvstore, across vLLM instances and restarts.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KVStoreConnector",
        "kv_connector_module_path": "kvstore.integrations.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"master": "10.0.0.1:50051"}}'

Extra config keys (each falls back to its KVSTORE_* variable, so every worker can be configured by
environment alone): master, namespace, replicas, transport, load_deadline_ms (the load budget: a block not
arrived by then is a load error, recomputed), head_split (members per block of an attention group; 0: one
per KV head. A positive divisor of the KV heads that every TP size of the deployment divides, like vLLM
Mooncake's store_tp_size: fewer objects per block, e.g. 1 for a TP=1-only deployment instead of 8 for
Llama-3-8B. Deployments sharing a store must agree on it (the largest TP size among them, or the default):
a member key names its split, `#<i>of<n>`, so other splits never read each other's members. A split this
instance's TP size cannot read as whole members is refused at construction).

How it works. Every KV cache group of full attention, MLA, sliding window, chunked local attention or Mamba /
linear-attention state (vLLM's "align" mode) is stored (kvstore.integrations.vllm_groups has vLLM's rule for
each: which blocks a hit reads; a state group reads the state of the hit's last block). Block i of group g is
one store group keyed by the block's sequence hash and digest (kvstore.integrations.vllm_keys), visible only
while whole; its members are head slices, one per KV head, each holding its heads of every layer of the group
in one canonical order (kvstore.integrations.head_layout), so a store written at one TP size serves every
other. The scheduler side asks the store which blocks of a prompt exist (member 0 of each group, one
batch_exists; no worker round trip), counts the longest prefix for which every group has what it reads, and
plans loads of exactly those blocks (never into a null block) and saves of the prompt's full blocks. The
worker side registers each KV allocation with the store once and moves the members of its own heads straight
from and into vLLM's cache tensors (no copy); only the first replica of a head writes it. A step's
synchronous loads run in start_load_kv on the calling thread (the first attention layer would wait for the
whole load anyway: an object holds every layer of its block); saves of full-attention groups
are submitted in wait_for_save and run while the next step computes (a finished request's blocks stay pinned
until they are done); saves of window groups end before wait_for_save returns, since vLLM frees and reuses
blocks that leave a window while the request still runs. A state group's block is saved only where vLLM's
scheduler offers it as a cached state (its exact block id and boundary), also before wait_for_save
returns; a sharded state is one member per TP rank, under a key that names the TP size
(kvstore.integrations.vllm_state), so it is shared between instances of the same TP size only.

Failures never feed wrong KV. With one KV cache group a block that fails to load (miss, checksum, dead
node) is reported through get_block_ids_with_load_errors and vLLM recomputes from it; with several (or a
state group, whose hit state vLLM copies before a step's loads start), loads are asynchronous and a failed
one is reported through failed_recving (vLLM recomputes the request). With the master down, lookups find
nothing and saves are dropped: vLLM computes as if the store were empty.

Limits: R-SWA, cross attention, and Mamba state outside "align" mode or with speculative blocks are not
served: a model with one gets no external hits (a warning says so). CUDA KV caches move through
page-locked host staging (kvstore.client.gpu_buffers: verified there before any byte reaches the GPU);
vLLM's CPU backend is the path CI runs, the CUDA one runs in the `gpu` tests on a GPU machine.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

from kvstore.config import StoreConfig
from kvstore.errors import KVStoreError
from kvstore.integrations.head_layout import HeadSplit
from kvstore.integrations.paged import (
    BlockMover,
    MoveStats,
    StoreLink,
    store_settings,
)
from kvstore.integrations.vllm_groups import FULL, GroupRule, rule_for_spec
from kvstore.integrations.vllm_keys import BlockNames, parallel_ranks
from kvstore.integrations.vllm_memory import KVMemoryLifecycle
from kvstore.integrations.vllm_metadata import BlockMove, KVStoreConnectorMetadata
from kvstore.integrations.vllm_scheduler_side import SchedulerSide
from kvstore.integrations.vllm_state import state_heads, state_suffix
from kvstore.integrations.vllm_worker_side import WorkerSide

log = logging.getLogger("kvstore.vllm")


# -- stats (the metadata the scheduler sends its workers: kvstore.integrations.vllm_metadata) ----------
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


@dataclass(frozen=True)
class GroupLayout:
    """The model's KV cache groups: each group's layers (in a fixed order), its rule (None for a kind
    kvstore does not serve) and its KV heads in the whole model (1 for MLA's latent: not split by heads)."""

    layers: list[list[str]]
    rules: list[GroupRule | None]
    heads: list[int]
    suffixes: list[str] = field(default_factory=list)  # per group: its keys' namespace suffix (state groups)
    splits: list[int] = field(default_factory=list)  # per group: members per block (default: its heads)

    @classmethod
    def of(cls, kv_cache_config: Any, vllm_config: Any, head_split: int = 0) -> GroupLayout:
        """`head_split` (StoreConfig.head_split; 0: one member per KV head) splits the blocks of groups
        split by heads; MLA's latent and state groups keep their own member counts."""
        groups = list(getattr(kv_cache_config, "kv_cache_groups", []) or [])
        rules = [rule_for_spec(g.kv_cache_spec) for g in groups]
        tp = _tp_size(vllm_config)
        heads = [_group_heads(vllm_config, g.kv_cache_spec) for g in groups]
        return cls(
            [list(g.layer_names) for g in groups],
            rules,
            heads,
            [
                state_suffix(g.kv_cache_spec, tp) if rule is not None and rule.holds_state else ""
                for g, rule in zip(groups, rules, strict=True)
            ],
            [
                _member_count(h, head_split, tp) if _split_by_heads(g.kv_cache_spec) else h
                for g, h in zip(groups, heads, strict=True)
            ],
        )

    def suffix(self, group: int) -> str:
        """The namespace suffix of a group's keys (a sharded state group's names its TP size)."""
        return self.suffixes[group] if group < len(self.suffixes) else ""

    def holds_state(self, group: int) -> bool:
        rule = self.rules[group]
        return rule is not None and rule.holds_state

    def members(self, group: int) -> int:
        """Head slices (members) of a block of `group`: by default one per KV head, so every TP size reads
        whole members (kvstore.integrations.head_layout); fewer under a head_split setting."""
        return self.splits[group] if group < len(self.splits) else self.heads[group]

    def unserved(self, block_size: int) -> list[int]:
        """Groups the connector cannot serve (another kind, or blocks of another size)."""
        return [g for g, r in enumerate(self.rules) if r is None or r.block_size != block_size]


def _total_kv_heads(vllm_config: Any, spec: Any = None) -> int:
    """The model's KV heads (not one TP rank's): from the model config, else a rank's spec times TP."""
    model_config = getattr(vllm_config, "model_config", None)
    total = getattr(model_config, "get_total_num_kv_heads", None)
    if callable(total):
        return int(total())
    return max(1, int(getattr(spec, "num_kv_heads", 1) or 1) * _tp_size(vllm_config))


def _tp_size(vllm_config: Any) -> int:
    parallel = getattr(vllm_config, "parallel_config", None)
    return int(getattr(parallel, "tensor_parallel_size", 1) or 1)


def _member_count(heads: int, head_split: int, tp_size: int) -> int:
    """Members per block of a group split by heads: `head_split`, or one per KV head (0). A split this TP
    size cannot read as whole members is refused here, at construction (HeadSplit's error; rank 0 stands
    for every rank: the check is the same for all)."""
    if not head_split:
        return heads
    try:
        HeadSplit.plan(heads, 0, tp_size, head_split)
    except KVStoreError as exc:
        raise type(exc)(f"head_split={head_split} (KVSTORE_HEAD_SPLIT): {exc}") from exc
    return head_split


def _split_by_heads(spec: Any) -> bool:
    """Whether a group's blocks are head slices that head_split may group (not MLA's latent nor a
    state)."""
    name = type(spec).__name__
    return name != "MambaSpec" and "MLA" not in name


def _group_heads(vllm_config: Any, spec: Any) -> int:
    """KV heads a group's blocks are split by: MLA's latent is not split (1); a Mamba state has one
    member per TP rank, or one if every rank holds it whole (kvstore.integrations.vllm_state)."""
    if type(spec).__name__ == "MambaSpec":
        return state_heads(spec, _tp_size(vllm_config))
    return 1 if "MLA" in type(spec).__name__ else _total_kv_heads(vllm_config, spec)


def _default_namespace(vllm_config: Any, kv_cache_config: Any) -> str:
    """Model + KV layout (the whole model's, not one rank's: every TP size shares a block): two
    deployments share blocks only when their KV bytes mean the same. (A state group's per-rank layout is
    in its keys' suffix instead, so a hybrid model's attention blocks are shared across TP sizes.)"""
    model = getattr(getattr(vllm_config, "model_config", None), "model", "model")
    layout = []
    for group in getattr(kv_cache_config, "kv_cache_groups", []) or []:
        spec = group.kv_cache_spec
        state = type(spec).__name__ == "MambaSpec"
        layout.append(
            (
                type(spec).__name__,
                getattr(spec, "block_size", None),
                "state" if state else _group_heads(vllm_config, spec),
                getattr(spec, "head_size", None),
                str(getattr(spec, "dtype", "")),
                tuple(group.layer_names),
            )
        )
    digest = hashlib.sha256(repr((model, layout)).encode()).hexdigest()[:16]
    return f"vllm:{model}:{digest}"


# -- the connector ----------------------------------------------------------------------------------------
class KVStoreConnector(KVMemoryLifecycle, KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.kv_cache_config = kv_cache_config
        extra = dict(getattr(self._kv_transfer_config, "kv_connector_extra_config", None) or {})
        settings = store_settings(extra)
        replicas = settings.get("replicas")
        self.link = StoreLink(settings)
        self.block_size = int(vllm_config.cache_config.block_size)
        head_split = StoreConfig.load(**settings).head_split
        self.groups = GroupLayout.of(kv_cache_config, vllm_config, head_split)
        if not self.groups.rules:  # no config: one full-attention group over every layer
            heads = _total_kv_heads(vllm_config)
            self.groups = GroupLayout(
                [[]],
                [GroupRule(FULL, self.block_size)],
                [heads],
                splits=[_member_count(heads, head_split, _tp_size(vllm_config))],
            )
        unserved = self.groups.unserved(self.block_size)
        self.active = not unserved
        # Several groups: a failed load can only be reported per request (vLLM maps failed block ids back
        # to requests for one group only); a state group: vLLM copies the hit's state before this step's
        # loads start. Such loads are asynchronous: they end before the request is scheduled.
        self.async_loads = len(self.groups.rules) > 1 or any(
            r is not None and r.holds_state for r in self.groups.rules
        )
        if unserved:
            kinds = [type(kv_cache_config.kv_cache_groups[g].kv_cache_spec).__name__ for g in unserved]
            log.warning("kvstore connector: KV cache group(s) %s are not served: no blocks are stored", kinds)
        namespace = self.link.namespace() or _default_namespace(vllm_config, kv_cache_config)
        self.names = BlockNames(namespace, self.block_size, len(self.groups.rules))
        self.tp_rank, self.tp_size, self.all_stages, self.my_stage = parallel_ranks(vllm_config)
        self.mover = BlockMover(self.link, int(replicas) if replicas is not None else None)
        self.scheduler_side = SchedulerSide(self) if role == KVConnectorRole.SCHEDULER else None
        self.worker_side = WorkerSide(self) if role == KVConnectorRole.WORKER else None

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a dropped save is a later miss, never a wrong answer

    # -- scheduler side
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        assert self.scheduler_side is not None
        return self.scheduler_side.matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self.scheduler_side is not None
        self.scheduler_side.after_alloc(request, blocks, num_external_tokens)

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
        self.remember_kv_caches(kv_caches)  # (registered again after sleep mode's wake-up)
        self.worker_side.register(kv_caches)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        assert self.worker_side is not None
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVStoreConnectorMetadata)
        self.worker_side.start_load(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # a step's synchronous loads ended in start_load_kv (see WorkerSide.start_load)

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
        return self.worker_side.finished(finished_req_ids), self.worker_side.finished_loads() or None

    def get_transfer_results(self, finished_req_ids: set[str]) -> Any:
        results = super().get_transfer_results(finished_req_ids)
        if self.worker_side is not None:
            results.failed_recving = set(self.worker_side.take_failed_loads())
        return results

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
        worker = self.worker_side
        if store is not None and worker is not None and worker.registrations is not None:
            worker.registrations.unregister(store)
        self.link.close()


__all__ = ["BlockMove", "KVStoreConnector", "KVStoreConnectorMetadata", "KVStoreConnectorStats", "MoveStats"]
