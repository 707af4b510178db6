"""`kvstore bench trace`: replay a FAST'25-format request trace (JSONL, `hash_ids` = prefix-chained
512-token blocks) through the store's cache policy and report the block hit rate.

A request hits on its leading run of cached blocks (a block is worthless without its prefix); then all of
its blocks are stored or touched. `global` pools every node's capacity into one cache (Mooncake's design);
`local` gives each node a private cache and routes each request to the node holding its longest prefix
(ties: the node that served the fewest blocks), as the paper's baseline.

`--simulate` drives the master's own policy objects (kvstore.master.planners.eviction) without moving data;
without it every block is a real object of `--payload-bytes` in a real store (master RPC, segments,
transfers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from kvstore.errors import InvalidArgumentError
from kvstore.master.planners.eviction import EvictionPolicy, make_policy

Trace = list[list[int]]
T = TypeVar("T")


def policy_names(text: str) -> list[str]:
    """The eviction policies of a comma list, each made once so that an unknown name fails here, clearly."""
    names = [p.strip() for p in text.split(",") if p.strip()]
    for name in names:
        make_policy(name)
    return names


def load_trace(path: str | Path, limit: int | None = None) -> Trace:
    """Requests' hash_ids; every line is checked (clear error with the line number, nothing guessed)."""
    return load_timed_trace(path, limit)[0]


def load_timed_trace(path: str | Path, limit: int | None = None) -> tuple[Trace, list[float]]:
    """Requests' hash_ids and times in seconds (`timestamp` is in milliseconds; absent means 0)."""
    records = load_records(path, limit)
    return [r.hash_ids for r in records], [r.time for r in records]


@dataclass
class TraceRecord:
    hash_ids: list[int]
    time: float  # seconds
    input_length: int  # tokens (absent: 512 a block)
    output_length: int


def load_records(path: str | Path, limit: int | None = None) -> list[TraceRecord]:
    """Every request of the trace; every line is checked (clear error with the line number, nothing
    guessed)."""
    records: list[TraceRecord] = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read trace {path}: {exc.strerror}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidArgumentError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        ids = record.get("hash_ids") if isinstance(record, dict) else None
        if not isinstance(ids, list) or not all(type(h) is int and h >= 0 for h in ids):
            raise InvalidArgumentError(f"{path}:{number}: 'hash_ids' must be a list of non-negative integers")
        stamp = record.get("timestamp", 0)
        if type(stamp) not in (int, float) or not 0 <= stamp < float("inf"):
            raise InvalidArgumentError(f"{path}:{number}: 'timestamp' must be a non-negative number")
        lengths = [record.get("input_length", 512 * len(ids)), record.get("output_length", 0)]
        if not all(type(n) is int and 0 <= n < 1 << 31 for n in lengths):
            raise InvalidArgumentError(
                f"{path}:{number}: input_length and output_length must be token counts"
            )
        records.append(TraceRecord(ids, stamp / 1000.0, *lengths))
        if limit is not None and len(records) >= limit:
            break
    if not records:
        raise InvalidArgumentError(f"{path}: no requests")
    return records


def leading_run(keys: Sequence[T], present: Container[T]) -> int:
    """How many leading keys are present: the hits of a request (a block is worthless without its
    prefix)."""
    n = 0
    for k in keys:
        if k not in present:
            break
        n += 1
    return n


class SimulatedCache:
    """A cache of block ids of fixed capacity, ordered by a master eviction policy."""

    def __init__(self, policy: str, capacity: int) -> None:
        if capacity <= 0:
            raise InvalidArgumentError("capacity must be positive")
        self.policy: EvictionPolicy = make_policy(policy)
        self.capacity = capacity
        self.present: set[str] = set()
        self.evictions = 0

    def prefix(self, keys: Sequence[str]) -> int:
        return leading_run(keys, self.present)

    def admit(self, keys: Sequence[str]) -> None:
        for k in keys:
            if k in self.present:
                self.policy.on_access(k)
            else:
                self.present.add(k)
                self.policy.on_insert(k, 1)
        while len(self.present) > self.capacity:
            victim = next(self.policy.candidates())
            self.present.discard(victim)
            self.policy.on_remove(victim)
            self.evictions += 1


@dataclass
class TraceResult:
    trace: str
    mode: str
    nodes: int
    capacity_blocks: int  # per node
    policy: str
    hit_rate: float
    requests: int
    blocks: int
    hits: int
    evictions: int
    simulate: bool
    per_node_hit_rate: list[float] = field(default_factory=list)
    per_node_blocks: list[int] = field(default_factory=list)
    # With a disk tier (capacity_blocks is then the memory tier's): where the hits came from.
    disk_capacity_blocks: int = 0
    memory_hits: int = 0
    disk_hits: int = 0
    demotions: int = 0
    promotions: int = 0


class _Node:
    """One cache: a simulated one, or a real store behind the same three calls."""

    def __init__(
        self, prefix: Callable[[list[str]], int], admit: Callable[[list[str], int, float], None]
    ) -> None:
        self.prefix = prefix
        self.admit = admit
        self.hits = 0
        self.blocks = 0


ROUTES = ("longest", "balanced")


def _route(matches: list[int], nodes: list[_Node], length: int, route: str) -> int:
    """longest: the node with the longest prefix, ties to the least loaded (the paper's baseline).
    balanced: the same when that node holds at least half the prompt, else the least loaded node
    (cache-aware load balancing, as engine routers do; without it one shared first block sends every
    request to one node)."""
    best = max(range(len(nodes)), key=lambda i: (matches[i], -nodes[i].blocks))
    if route == "balanced" and 2 * matches[best] < length:
        return min(range(len(nodes)), key=lambda i: nodes[i].blocks)
    return best


def replay(
    trace: Trace,
    nodes: list[_Node],
    mode: str,
    route: str = "longest",
    times: Sequence[float] | None = None,
) -> tuple[int, int]:
    """Replays the trace (request i at times[i], trace seconds, where given); returns (hits, blocks)."""
    total_hits = total_blocks = 0
    for i, ids in enumerate(trace):
        keys = [str(h) for h in ids]
        if mode == "global":
            node = nodes[0]
            n = node.prefix(keys)
        else:
            matches = [nd.prefix(keys) for nd in nodes]
            chosen = _route(matches, nodes, len(keys), route)
            node, n = nodes[chosen], matches[chosen]
        node.admit(keys, n, times[i] if times is not None else float(i))
        node.hits += n
        node.blocks += len(keys)
        total_hits += n
        total_blocks += len(keys)
    return total_hits, total_blocks


def _admit_all(cache: SimulatedCache) -> Callable[[list[str], int, float], None]:
    def admit(keys: list[str], hits: int, now: float) -> None:
        cache.admit(keys)

    return admit


def simulate(
    trace: Trace,
    capacity: int,
    policy: str = "adaptive",
    mode: str = "global",
    nodes: int = 1,
    name: str = "trace",
    route: str = "longest",
) -> TraceResult:
    if mode not in ("global", "local") or route not in ROUTES:
        raise InvalidArgumentError("mode is global or local; route is longest or balanced")
    caches = (
        [SimulatedCache(policy, capacity * nodes)]
        if mode == "global"
        else [SimulatedCache(policy, capacity) for _ in range(nodes)]
    )
    replay_nodes = [_Node(c.prefix, _admit_all(c)) for c in caches]
    replay(trace, replay_nodes, mode, route)
    return _result(
        name, mode, nodes, capacity, policy, len(trace), replay_nodes, sum(c.evictions for c in caches), True
    )


def replay_master_config(policy: str, payload_bytes: int) -> dict[str, Any]:
    """MasterConfig fields of a real replay (after checking the object size): inline eviction only (no
    background watermarks), so capacity means exactly `capacity` blocks."""
    if payload_bytes <= 0 or payload_bytes % 64:
        raise InvalidArgumentError("--payload-bytes must be a positive multiple of 64 (the allocation unit)")
    return {
        "eviction_policy": policy,
        "high_watermark": 1.0,
        "low_watermark": 1.0,
        "busy_poll_us": 0,
        "port": 0,
    }


def replay_real(
    trace: Trace,
    capacity: int,
    policy: str = "adaptive",
    mode: str = "global",
    nodes: int = 1,
    payload_bytes: int = 1024,
    name: str = "trace",
    route: str = "longest",
) -> TraceResult:
    """Every block a real object: masters, segments and transfers as deployed, in this process."""
    from kvstore import Store
    from kvstore.config import MasterConfig
    from kvstore.master import Master

    config = replay_master_config(policy, payload_bytes)
    masters = [
        Master.start_in_thread(MasterConfig.load(**config)) for _ in range(1 if mode == "global" else nodes)
    ]
    stores: list[Store] = []
    try:
        for i in range(nodes):
            master = masters[0 if mode == "global" else i]
            stores.append(
                Store.connect(
                    master.address,
                    segment_size=capacity * payload_bytes,
                    buffer_size="1MiB",
                    rpc_busy_poll_us=0,  # the masters run in this process
                )
            )
        payload = np.zeros(payload_bytes, np.uint8)
        for s in stores:
            s.register_buffer(payload)

        def node_for(store: Store) -> _Node:
            def admit(keys: list[str], n: int, now: float) -> None:
                # match_prefix already touched the hits; the rest is offered (stored, or touched if present).
                store.batch_put_from(keys[n:], [payload] * (len(keys) - n))

            return _Node(lambda keys: store.match_prefix(keys).matched, admit)

        replay_nodes = [node_for(stores[0])] if mode == "global" else [node_for(s) for s in stores]
        replay(trace, replay_nodes, mode, route)
        evictions = sum(int(m.master.state.counters.evictions) for m in masters)
    finally:
        for s in stores:
            s.close()
        for m in masters:
            m.stop()
    return _result(name, mode, nodes, capacity, policy, len(trace), replay_nodes, evictions, False)


@dataclass(frozen=True)
class PlotPlace:
    """Where a plot goes (a PNG path), the trace's name for its title, and a capacity to mark (the one
    asked for, which a sweep surrounds)."""

    out: str
    name: str
    marked: int | None = None


def plot(
    trace: Trace,
    capacities: list[int],
    policies: list[str],
    mode: str,
    nodes: int,
    where: PlotPlace,
    route: str = "longest",
) -> list[TraceResult]:
    """Hit rate vs capacity (simulated) for each policy at `capacities`, saved as a PNG."""
    out, name = where.out, where.name
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InvalidArgumentError("--plot needs matplotlib: pip install 'kvstore-llm[bench]'") from exc
    results = [simulate(trace, c, p, mode, nodes, name, route) for p in policies for c in capacities]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in policies:
        rows = [r for r in results if r.policy == p]
        ax.plot([r.capacity_blocks for r in rows], [r.hit_rate for r in rows], marker="o", label=p)
    if where.marked is not None:
        ax.axvline(where.marked, color="gray", linestyle="--", label=f"asked: {where.marked} blocks")
    ax.set_xscale("log")
    ax.set_xlabel("capacity per node (blocks)")
    ax.set_ylabel("block hit rate")
    ax.set_title(f"{name}: {mode}, {nodes} node(s)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return results


def _result(
    name: str,
    mode: str,
    nodes: int,
    capacity: int,
    policy: str,
    requests: int,
    replay_nodes: list[_Node],
    evictions: int,
    simulated: bool,
) -> TraceResult:
    hits = sum(nd.hits for nd in replay_nodes)
    blocks = sum(nd.blocks for nd in replay_nodes)
    return TraceResult(
        name,
        mode,
        nodes,
        capacity,
        policy,
        hits / blocks if blocks else 0.0,
        requests,
        blocks,
        hits,
        evictions,
        simulated,
        [nd.hits / nd.blocks if nd.blocks else 0.0 for nd in replay_nodes],
        [nd.blocks for nd in replay_nodes],
    )


def to_json(result: TraceResult) -> str:
    return json.dumps(asdict(result))
