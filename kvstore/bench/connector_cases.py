"""`kvstore bench connector --case hybrid|tp-mismatch`: the vLLM connector's data path for a model with
several KV cache groups, and for readers at another TP size than the writers, beside the store's own calls.

What the connector stores (the key scheme every kvstore connector shares): block i of KV cache group g is
one store group, `seq_key(ns_g, seq_i, digest_i)`, of S head-slice members `member_key(group, s, S)` (S =
the model's KV heads, kvstore.integrations.head_layout), each holding its heads of every layer of the
group in the canonical order. A TP rank saves and loads only its own members, as pieces straight from and
into its KV tensors (vLLM's CPU layout, [blocks, heads, block tokens, K|V]), through a BlockMover.

- hybrid: a Gemma-3-style model at TP=1 with vLLM's KV cache groups (five sliding-window layers per
  full-attention layer, as many layers per group as there are full-attention layers; every group's blocks
  drawn from one pool whose tensors the groups share). A save stores every block of every group; a load
  reads what vLLM's rule needs for a hit of the whole request (kvstore.integrations.vllm_groups): every
  block of the full-attention group, only the last blocks under the window of the others.
- tp-mismatch: a dense model saved by `write_tp` ranks and loaded by `read_tp` ranks (default 2 and 4),
  each rank moving only its head range.

The comparison moves the same objects (the same count and sizes in the same per-rank batches, keys of the
same form in another namespace) with the store's own batch put/get from one contiguous buffer per object,
alternating with the connector request by request. The scheduler's part (hashing the prompt, planning
which blocks move) is done before the clock starts; naming each object's key is timed on both sides.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvstore.bench.connector_bench import (
    ConnectorBenchResult,
    alternating_rounds,
    mapped_memory,
    measure_baseline,
    rates,
)
from kvstore.bench.models import HYBRID_MODELS, MODELS
from kvstore.blocks import BlockHasher, seq_hashes
from kvstore.errors import InvalidArgumentError
from kvstore.integrations.head_layout import HeadLayout, HeadSplit, layer_view
from kvstore.integrations.paged import Batch, BlockMover, Pieces, Registrations, StoreLink
from kvstore.integrations.vllm_groups import FULL, WINDOW, GroupRule
from kvstore.integrations.vllm_keys import BlockNames
from kvstore.store import Store


@dataclass(frozen=True)
class KVGroup:
    """One vLLM KV cache group: the rule for which blocks a hit reads, and its layers (global indices)."""

    rule: GroupRule
    layers: tuple[int, ...]


@dataclass(frozen=True)
class CaseSpec:
    """What one case runs: the model's KV geometry and groups, and the TP sizes that save and load."""

    case: str
    model: str
    groups: tuple[KVGroup, ...]
    heads: int
    content: int  # uint16 values of one token of one head: K then V
    block_tokens: int
    write_tp: int
    read_tp: int
    window: int = 0


def vllm_kv_groups(layers: int, full_every: int, block_tokens: int, window: int) -> list[KVGroup]:
    """vLLM's KV cache groups (v1/core/kv_cache_utils.py, uniform page size) for a model whose layer i is
    full attention when (i + 1) % full_every == 0 and a sliding window of `window` tokens otherwise
    (full_every <= 1: all full attention). Each attention type's layers are cut into groups of the
    smallest type's count (the largest's when within 1.5x), group k of a type taking layers k::groups."""
    full = [i for i in range(layers) if full_every <= 1 or (i + 1) % full_every == 0]
    sliding = [i for i in range(layers) if i not in set(full)]
    buckets = [(GroupRule(FULL, block_tokens), full)] if full else []
    if sliding:
        buckets.append((GroupRule(WINDOW, block_tokens, window), sliding))
    buckets.sort(key=lambda bucket: bucket[1][0])  # vLLM's order: the type of the first layer first
    sizes = [len(names) for _, names in buckets]
    size = max(sizes) if max(sizes) < min(sizes) * 1.5 else min(sizes)
    groups = []
    for rule, names in buckets:
        count = -(-len(names) // size)
        groups += [KVGroup(rule, tuple(names[k::count])) for k in range(count)]
    return groups


def plan_case(case: str, model: str | None, window: int, write_tp: int, read_tp: int) -> CaseSpec:
    """The case's geometry, or InvalidArgumentError for a model or TP size it cannot run."""
    if case == "hybrid":
        model = model or "gemma3-4b"
        if model not in HYBRID_MODELS:
            raise InvalidArgumentError(f"the hybrid case needs a hybrid model: {', '.join(HYBRID_MODELS)}")
        layers, heads, dim, elem, tokens, full_every = HYBRID_MODELS[model]
        if window <= 0:
            raise InvalidArgumentError("the sliding window must be a positive number of tokens")
        groups = vllm_kv_groups(layers, full_every, tokens, window)
        return CaseSpec(case, model, tuple(groups), heads, _values(dim, elem), tokens, 1, 1, window)
    if case != "tp-mismatch":
        raise InvalidArgumentError(f"unknown connector bench case {case!r}")
    model = model or "llama3-8b"
    if model not in MODELS:
        raise InvalidArgumentError(f"the tp-mismatch case needs a dense model: {', '.join(MODELS)}")
    layers, heads, dim, elem, tokens = MODELS[model]
    for tp in (write_tp, read_tp):
        HeadSplit.plan(heads, 0, tp)  # a TP size the heads do not allow is refused here, before any work
    groups = vllm_kv_groups(layers, 1, tokens, 0)
    return CaseSpec(case, model, tuple(groups), heads, _values(dim, elem), tokens, write_tp, read_tp)


def _values(head_dim: int, elem: int) -> int:
    """uint16 values of one token of one head: its K and V, 2 * head_dim * elem bytes."""
    return 2 * head_dim * elem // 2


class Instance:
    """One vLLM instance's KV cache at TP size `tp`. Per rank, the tensors vLLM allocates for a model with
    several KV cache groups: one per position in a group, shared by that position's layer of every group,
    its blocks drawn from one pool (group g's block i is block id g * blocks + i). Per rank and group, the
    HeadLayout of its members."""

    def __init__(self, spec: CaseSpec, tp: int, blocks: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.spec = spec
        self.blocks = blocks
        self.splits = [HeadSplit.plan(spec.heads, r, tp) for r in range(tp)]
        slots = max(len(group.layers) for group in spec.groups)
        shape = (len(spec.groups) * blocks, self.splits[0].local_heads, spec.block_tokens, spec.content)
        self.tensors = [[mapped_memory(shape, rng) for _ in range(slots)] for _ in self.splits]
        self.layouts = [
            [
                HeadLayout(
                    [layer_view(f"l{layer}", tensors[j]) for j, layer in enumerate(group.layers)], split
                )
                for group in spec.groups
            ]
            for tensors, split in zip(self.tensors, self.splits, strict=True)
        ]
        self.registrations = Registrations([s for rank in self.layouts for lay in rank for s in lay.spans])

    def heads(self, slot: int, ids: np.ndarray) -> np.ndarray:
        """Blocks `ids` of tensor position `slot` with every KV head, from the ranks that write them."""
        return np.concatenate(
            [t[slot][ids] for t, split in zip(self.tensors, self.splits, strict=True) if split.writes], axis=1
        )


@dataclass
class Prompt:
    """One request's blocks as the scheduler names them (sequence hash, digest)."""

    seqs: list[int]
    digests: list[str]


def prompt(namespace: str, tokens: np.ndarray, block_tokens: int) -> Prompt:
    return Prompt(seq_hashes(tokens, block_tokens), BlockHasher(block_tokens, namespace).keys(tokens))


def object_keys(
    namespace: str, groups: int, group: int, split: HeadSplit, blocks: Sequence[int], names: Prompt
) -> list[str]:
    """The keys of this rank's members of `blocks` of KV cache group `group`, block by block, as the vLLM
    connector names them (kvstore.integrations.vllm_keys)."""
    naming = BlockNames(namespace, 1, groups)  # (block size: only for hashing prompts, not used here)
    keys = []
    for i in blocks:
        keys += naming.keys(names.seqs[i], names.digests[i], group, split.members, split.count)
    return keys


def rank_batch(
    instance: Instance, rank: int, wanted: Sequence[range], namespace: str, names: Prompt
) -> Batch:
    """What the vLLM worker hands its BlockMover for one rank: its members of the `wanted` blocks of each
    KV cache group, keys and pieces in the same order."""
    batch = Batch()
    parts = []
    for g, layout in enumerate(instance.layouts[rank]):
        if not wanted[g]:
            continue
        ids = g * instance.blocks + np.arange(wanted[g].start, wanted[g].stop, dtype=np.int64)
        batch.keys += object_keys(namespace, len(wanted), g, layout.split, wanted[g], names)
        parts.append(layout.rank_block_pieces(ids))  # (an array: no Python int per piece)
    batch.tags = [None] * len(batch.keys)
    if not parts:  # a rank that writes nothing (a second replica of its heads)
        return batch
    if len(parts) == 1:
        batch.pieces = parts[0]
        return batch
    batch.pieces = Pieces(
        np.concatenate([p.addrs for p in parts]),
        np.concatenate([p.lengths for p in parts]),
        np.concatenate([p.counts for p in parts]),
    )
    return batch


def member_sizes(instance: Instance, rank: int, wanted: Sequence[range]) -> list[int]:
    """The sizes of rank_batch's objects, in its order."""
    out: list[int] = []
    for g, layout in enumerate(instance.layouts[rank]):
        out += [layout.member_bytes] * (len(wanted[g]) * len(layout.split.members))
    return out


class PlainSide:
    """The store's own calls on the same objects: per rank one batch, each object one contiguous view of
    a flat buffer (`source`'s views are what `target`'s are read into, object for object)."""

    def __init__(self, save_sizes: list[list[int]], load_picks: list[list[int]], seed: int) -> None:
        flat = [size for sizes in save_sizes for size in sizes]
        self.src = mapped_memory((sum(flat) // 2,), np.random.default_rng(seed)).view(np.uint8)
        ends = np.cumsum(flat)
        views = np.split(self.src, ends[:-1])
        self.save_views, at = [], 0
        for sizes in save_sizes:
            self.save_views.append(views[at : at + len(sizes)])
            at += len(sizes)
        # load_picks[r]: the saved objects (flat indices) reader rank r loads
        picked = [i for picks in load_picks for i in picks]
        loaded = [flat[i] for i in picked]
        self.dst = mapped_memory((sum(loaded) // 2,), np.random.default_rng(seed + 1)).view(np.uint8)
        dst_views = np.split(self.dst, np.cumsum(loaded)[:-1])
        self.load_views, at = [], 0
        for picks in load_picks:
            self.load_views.append(dst_views[at : at + len(picks)])
            at += len(picks)
        self.expected = [views[i] for i in picked]

    def verified(self) -> bool:
        got = [v for views in self.load_views for v in views]
        return all(np.array_equal(a, b) for a, b in zip(got, self.expected, strict=True))


def run_case(
    master: str,
    case: str,
    model: str | None,
    blocks: int,
    requests: int,
    window: int = 128,
    write_tp: int = 2,
    read_tp: int = 4,
) -> ConnectorBenchResult:
    spec = plan_case(case, model, window, write_tp, read_tp)
    store = Store.connect(master)
    mover = BlockMover(StoreLink.wrapping(store))
    try:
        return CaseRun(store, mover, spec, blocks, requests).measure()
    finally:
        mover.close()
        store.close()


class CaseRun:
    """One case's alternating measurement: connector save, plain put, connector load, plain get for one
    request, plain first for the next; round 0 warms up and is not counted; each request's objects are
    removed once read back."""

    def __init__(self, store: Store, mover: BlockMover, spec: CaseSpec, blocks: int, requests: int) -> None:
        self.store, self.mover, self.spec, self.blocks, self.requests = store, mover, spec, blocks, requests
        self.source = Instance(spec, spec.write_tp, blocks, 1)
        self.target = Instance(spec, spec.read_tp, blocks, 2)
        self.target_before = [[t.copy() for t in rank] for rank in self.target.tensors]
        for instance in (self.source, self.target):
            instance.registrations.register(store)
        every = [range(blocks)] * len(spec.groups)
        self.saves = [every if split.writes else [range(0)] * len(every) for split in self.source.splits]
        self.loads = [[g.rule.needed(blocks) for g in spec.groups] for _ in self.target.splits]
        self.plain = self._plain_side()
        for flat in (self.plain.src, self.plain.dst):
            store.register_buffer(flat)
        run_id = uuid.uuid4().hex[:8]
        self.namespaces = {"c": f"bench-c-{run_id}", "s": f"bench-s-{run_id}"}
        rng = np.random.default_rng(5)
        tokens = [rng.integers(0, 2**17, blocks * spec.block_tokens) for _ in range(requests + 1)]
        self.prompts = {
            tag: [prompt(ns, t, spec.block_tokens) for t in tokens] for tag, ns in self.namespaces.items()
        }
        self.errors = 0
        self.reader_bytes = [0] * spec.read_tp

    def _plain_side(self) -> PlainSide:
        save_sizes = [member_sizes(self.source, r, want) for r, want in enumerate(self.saves)]
        index = self._saved_index()
        picks = []
        for r, want in enumerate(self.loads):
            split = self.target.splits[r]
            picks.append([index[(g, i, s)] for g in range(len(want)) for i in want[g] for s in split.members])
        return PlainSide(save_sizes, picks, 3)

    def _saved_index(self) -> dict[tuple[int, int, int], int]:
        """(group, block, member) -> its position among every saved object, ranks in order."""
        index: dict[tuple[int, int, int], int] = {}
        for r, want in enumerate(self.saves):
            split = self.source.splits[r]
            for g in range(len(want)):
                for i in want[g]:
                    for s in split.members:
                        index[(g, i, s)] = len(index)
        return index

    # -- the four timed steps; each returns the bytes it moved -------------------------------------
    def save(self, i: int) -> int:
        # Each rank's batch goes to the mover as its worker would hand it; they run one after another.
        futures = [
            self.mover.save(rank_batch(self.source, r, want, self.namespaces["c"], self.prompts["c"][i]))
            for r, want in enumerate(self.saves)
        ]
        sizes = self._sizes("save")
        return sum(self._count(f.result(), s) for f, s in zip(futures, sizes, strict=True))

    def load(self, i: int) -> int:
        # As the worker loads: one KV cache group's loads on the calling thread, in start_load_kv; with
        # several groups, asynchronously on the mover's thread (vLLM schedules the request once they end).
        batches = (
            rank_batch(self.target, r, want, self.namespaces["c"], self.prompts["c"][i])
            for r, want in enumerate(self.loads)
        )
        if len(self.spec.groups) == 1:
            results = [self.mover.load_here(batch) for batch in batches]
        else:
            results = [future.result() for future in [self.mover.load(batch) for batch in batches]]
        moved = 0
        for r, (ok, sizes) in enumerate(zip(results, self._sizes("load"), strict=True)):
            self.reader_bytes[r] = self._count(ok, sizes)
            moved += self.reader_bytes[r]
        return moved

    def put(self, i: int) -> int:
        moved = 0
        for r, want in enumerate(self.saves):
            keys = self._plain_keys(self.source, r, want, i)
            codes = self.store.batch_put_from(keys, self.plain.save_views[r])
            moved += self._count([c >= 0 for c in codes], [v.nbytes for v in self.plain.save_views[r]])
        return moved

    def get(self, i: int) -> int:
        moved = 0
        for r, want in enumerate(self.loads):
            keys = self._plain_keys(self.target, r, want, i)
            views = self.plain.load_views[r]
            got = self.store.batch_get_into(keys, views)
            sizes = [v.nbytes for v in views]
            moved += self._count([g == size for g, size in zip(got, sizes, strict=True)], sizes)
        return moved

    def _plain_keys(self, instance: Instance, rank: int, want: Sequence[range], i: int) -> list[str]:
        ns, names = self.namespaces["s"], self.prompts["s"][i]
        keys = []
        for g, layout in enumerate(instance.layouts[rank]):
            keys += object_keys(ns, len(want), g, layout.split, want[g], names)
        return keys

    def _sizes(self, kind: str) -> list[list[int]]:
        if kind == "save":
            return [member_sizes(self.source, r, w) for r, w in enumerate(self.saves)]
        return [member_sizes(self.target, r, w) for r, w in enumerate(self.loads)]

    def _count(self, ok: Sequence[bool], sizes: Sequence[int]) -> int:
        self.errors += len(ok) - sum(ok)
        return sum(size for good, size in zip(ok, sizes, strict=True) if good)

    # -- the run ---------------------------------------------------------------------------------------
    def measure(self) -> ConnectorBenchResult:
        timings = alternating_rounds(
            self.save,
            self.put,
            self.load,
            self.get,
            self.requests,
            lambda i: self.store.batch_remove(self._request_keys(i), force=True),
        )
        if not self.verified() or not self.plain.verified():
            self.errors += 1
        return self._result(timings)

    def _request_keys(self, i: int) -> list[str]:
        return [
            key
            for tag in self.namespaces
            for r, want in enumerate(self.saves)
            for g, layout in enumerate(self.source.layouts[r])
            for key in object_keys(
                self.namespaces[tag], len(want), g, layout.split, want[g], self.prompts[tag][i]
            )
        ]

    def verified(self) -> bool:
        """Every block a reader loaded holds the writers' bytes of its heads, and every block vLLM's rule
        skips is untouched."""
        source, target, blocks = self.source, self.target, self.blocks
        for g, group in enumerate(self.spec.groups):
            for r, split in enumerate(target.splits):
                needed = np.array([g * blocks + i for i in self.loads[r][g]], dtype=np.int64)
                skipped = np.setdiff1d(np.arange(g * blocks, (g + 1) * blocks), needed)
                heads = slice(split.first_head, split.first_head + split.local_heads)
                for j in range(len(group.layers)):
                    mine, before = target.tensors[r][j], self.target_before[r][j]
                    if not np.array_equal(mine[needed], source.heads(j, needed)[:, heads]):
                        return False
                    if not np.array_equal(mine[skipped], before[skipped]):
                        return False
        return True

    def _result(self, timings: dict[str, tuple[list[float], int]]) -> ConnectorBenchResult:
        saved, loaded = self._sizes("save"), self._sizes("load")
        objects_saved = sum(len(sizes) for sizes in saved)
        bytes_saved = sum(sum(sizes) for sizes in saved)
        object_bytes = bytes_saved // max(1, objects_saved)
        baseline = measure_baseline(self.store, object_bytes, bytes_saved)
        spec = self.spec
        return ConnectorBenchResult(
            "vllm",
            spec.model,
            self.blocks,
            object_bytes,
            self.requests,
            *rates(timings),
            errors=self.errors,
            case=spec.case,
            write_tp=spec.write_tp,
            read_tp=spec.read_tp,
            kv_cache_groups=len(spec.groups),
            head_split=self.source.splits[0].count,
            window=spec.window,
            objects_saved=objects_saved,
            objects_loaded=sum(len(sizes) for sizes in loaded),
            bytes_saved=bytes_saved,
            bytes_loaded=sum(sum(sizes) for sizes in loaded),
            reader_bytes=list(self.reader_bytes),
            baseline_gbps=baseline[0],
            baseline_kind=baseline[1],
        )
