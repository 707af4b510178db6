"""`kvstore bench routing`: replay a request trace over simulated engine instances and compare routers:
round-robin, least-loaded, and prefix-aware by the routing index (kvstore.index: the same table, event
decoding and match that `kvstore index` serves).

Each instance has a GPU prefix cache of `gpu_blocks` blocks (LRU) and prefills one request at a time. A
request's blocks are looked up from its first: those the chosen instance holds on its GPU cost nothing,
the next ones the store holds (when it is on) are loaded at the store's bandwidth, the rest are
prefilled. Time to first token = queueing + loading + prefilling. After serving, the instance publishes
what its GPU stored and evicted, as an engine's KV events would, into the index.

`prefix` asks the index for every instance's match and picks the one with the least estimated TTFT
(queue + load + prefill of what it lacks); `least-loaded` the shortest queue; `round-robin` the next.
Ties go to the instance that has worked least.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from kvstore.bench.trace import TraceRecord
from kvstore.errors import InvalidArgumentError
from kvstore.index.events import Batch, Event, Removed, Stored, Translator
from kvstore.index.table import PrefixIndex, Scope

POLICIES = ("round-robin", "least-loaded", "prefix")
BLOCK_TOKENS = 512  # the FAST'25 traces' block
SCOPE = Scope("trace", BLOCK_TOKENS)


@dataclass(frozen=True)
class TtftModel:
    prefill_s_per_token: float  # an instance's prefill time per uncached token
    block_load_s: float  # loading one cached block from the store (its bytes / the store's bandwidth)


@dataclass
class RoutingResult:
    policy: str
    instances: int
    requests: int
    gpu_hit_rate: float  # prompt tokens found on the chosen instance's GPU
    store_hit_rate: float  # prompt tokens loaded from the store
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    busiest_share: float  # the busiest instance's share of all prefill work (1/instances is even)


class _Instance:
    def __init__(self, name: str, gpu_blocks: int, index: PrefixIndex) -> None:
        self.name = name
        self.gpu: OrderedDict[int, None] = OrderedDict()
        self.capacity = gpu_blocks
        self.free_at = 0.0
        self.work = 0.0
        self.events = Translator(index, SCOPE, name, 0, 0)
        self.seq = 0

    def held_prefix(self, blocks: list[int]) -> int:
        n = 0
        while n < len(blocks) and blocks[n] in self.gpu:
            n += 1
        return n

    def keep(self, blocks: list[int]) -> None:
        """The request's blocks are on the GPU now (most recent last); the oldest go past capacity."""
        new = [b for b in blocks if b not in self.gpu]
        for b in blocks:
            self.gpu[b] = None
            self.gpu.move_to_end(b)
        gone = []
        while len(self.gpu) > self.capacity:
            gone.append(self.gpu.popitem(last=False)[0])
        events: list[Event] = []
        if gone:
            events.append(Removed(gone, "GPU", True))
        if new:
            events.append(Stored(new, None, None, BLOCK_TOKENS, "GPU", "", True))
        if events:
            self.events.apply(Batch(self.seq, 0, events))
            self.seq += 1


def simulate(
    records: list[TraceRecord],
    policy: str,
    instances: int,
    gpu_blocks: int,
    model: TtftModel,
    store: bool,
    speedup: float = 1.0,
) -> RoutingResult:
    """One replay. `speedup` divides the trace's inter-arrival times (a busier cluster)."""
    if policy not in POLICIES:
        raise InvalidArgumentError(f"routing policy is one of {', '.join(POLICIES)}")
    index = PrefixIndex()
    nodes = [_Instance(f"instance-{i}", gpu_blocks, index) for i in range(instances)]
    stored: set[int] = set()  # the store's blocks (unbounded: the pool outlives every GPU cache)
    ttft = np.empty(len(records))
    gpu_tokens = store_tokens = total_tokens = 0
    start = records[0].time if records else 0.0
    for i, r in enumerate(records):
        now = (r.time - start) / speedup
        blocks = r.hash_ids
        tokens = max(r.input_length, 1)
        if policy == "round-robin":
            node = nodes[i % instances]
        elif policy == "least-loaded":
            node = min(nodes, key=lambda n: (max(0.0, n.free_at - now), n.work))
        else:
            matches = index.match(SCOPE, blocks) if blocks else {}
            pool = stored if store else set()
            costs = []
            for n in nodes:
                m = matches.get(n.name)
                held = m.media.get("GPU", 0) if m else 0
                costs.append((_cost(n, now, blocks, held, tokens, pool, model)[0], n.work))
            node = nodes[costs.index(min(costs))]  # (ties: the instance that has worked least)
        held = node.held_prefix(blocks)
        cost, loaded = _cost(node, now, blocks, held, tokens, stored if store else set(), model)
        busy = cost - max(0.0, node.free_at - now)
        node.free_at = max(node.free_at, now) + busy
        node.work += busy
        ttft[i] = cost
        gpu_tokens += min(held * BLOCK_TOKENS, tokens)
        store_tokens += min(loaded * BLOCK_TOKENS, max(0, tokens - held * BLOCK_TOKENS))
        total_tokens += tokens
        node.keep(blocks)
        stored.update(blocks)
    work = sum(n.work for n in nodes) or 1.0
    return RoutingResult(
        policy=policy,
        instances=instances,
        requests=len(records),
        gpu_hit_rate=gpu_tokens / max(total_tokens, 1),
        store_hit_rate=store_tokens / max(total_tokens, 1),
        ttft_mean_s=float(ttft.mean()) if len(ttft) else 0.0,
        ttft_p50_s=float(np.percentile(ttft, 50)) if len(ttft) else 0.0,
        ttft_p90_s=float(np.percentile(ttft, 90)) if len(ttft) else 0.0,
        ttft_p99_s=float(np.percentile(ttft, 99)) if len(ttft) else 0.0,
        busiest_share=max(n.work for n in nodes) / work,
    )


def _cost(
    n: _Instance, now: float, blocks: list[int], held: int, tokens: int, stored: set[int], model: TtftModel
) -> tuple[float, int]:
    """(TTFT on `n`, blocks it would load from the store) for a request arriving `now`."""
    loaded = 0
    while held + loaded < len(blocks) and blocks[held + loaded] in stored:
        loaded += 1
    uncached = max(0, tokens - (held + loaded) * BLOCK_TOKENS)
    return max(
        0.0, n.free_at - now
    ) + loaded * model.block_load_s + uncached * model.prefill_s_per_token, loaded


def query_rate(
    records: list[TraceRecord], gpu_blocks: int, blocks_per_query: int = 32, seconds: float = 1.0
) -> float:
    """Index matches of `blocks_per_query` blocks a second on this core, over an index holding 8
    instances' caches from the trace (the index's own cost, no HTTP)."""
    index = PrefixIndex()
    nodes = [_Instance(f"instance-{i}", gpu_blocks, index) for i in range(8)]
    for i, r in enumerate(records):
        nodes[i % 8].keep(r.hash_ids)
    queries = [r.hash_ids[:blocks_per_query] for r in records if len(r.hash_ids) >= blocks_per_query]
    queries = queries or [r.hash_ids for r in records]
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for q in queries[:1000]:
            index.match(SCOPE, q)
        done += min(len(queries), 1000)
    return done / (time.perf_counter() - start)


def measure_store(seconds: float = 1.5) -> tuple[float, float | None, str | None]:
    """(store batch get GB/s, the in-run baseline's GB/s, its kind) on a store started here (512 KiB
    objects in batches of 32, as `kvstore bench store`)."""
    from kvstore.bench import store_bench

    cfg = store_bench.StoreBenchConfig(ops=("put", "get"), duration=seconds, segment_size=1 << 30)
    get = next(r for r in store_bench.run(cfg) if r.op == "get")
    return get.gbps, get.baseline_gbps, get.baseline_kind


def plot(results: list[RoutingResult], out: str, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InvalidArgumentError("--plot needs matplotlib: pip install 'kvstore-llm[bench]'") from exc
    fig, (hits, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    names = [r.policy for r in results]
    x = np.arange(len(results))
    hits.bar(x - 0.2, [r.gpu_hit_rate for r in results], 0.4, label="GPU (local)")
    hits.bar(x + 0.2, [r.store_hit_rate for r in results], 0.4, label="store")
    hits.set_xticks(x, names)
    hits.set_ylabel("prompt tokens hit")
    hits.legend()
    for i, q in enumerate(("ttft_p50_s", "ttft_p90_s", "ttft_mean_s")):
        ttft.bar(x + (i - 1) * 0.27, [getattr(r, q) for r in results], 0.27, label=q[5:-2])
    ttft.set_xticks(x, names)
    ttft.set_ylabel("time to first token (s)")
    ttft.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
