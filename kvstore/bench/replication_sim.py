"""Hot-block replication over a trace (the paper's Figure 11), on the master's own code.

A real `MasterState` with N segments runs on a clock driven by the trace's timestamps; requests become
match_prefix / put calls, replica copies are completed as soon as planned (the clients' part), and each
hit block is read from one of its replicas at random. Reports how the replica counts of the 10th, 100th
and 1000th most used blocks evolve, and how evenly reads spread over the nodes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from random import Random

from kvstore.config import MasterConfig
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import MountSegment

UNIT = 64  # bytes per simulated block: one allocation unit


@dataclass
class ReplicationResult:
    trace: str
    nodes: int
    capacity_blocks: int
    policy: str
    hit_rate: float
    requests: int
    blocks: int
    ranks: list[int]
    timeline: list[list[float]] = field(default_factory=list)  # [trace seconds, replicas of each rank...]
    reads_per_node: list[int] = field(default_factory=list)
    read_imbalance: float = 0.0  # max / mean reads per node (1.0 = perfectly even)
    copies: int = 0
    dropped: int = 0


def simulate_replication(
    trace: list[list[int]],
    timestamps: list[float],
    nodes: int,
    capacity: int,
    policy: str = "adaptive",
    hot_rate: float = 0.5,
    cool_rate: float = 0.05,
    half_life: float = 60.0,
    max_replicas: int = 3,
    samples: int = 20,
    name: str = "trace",
    seed: int = 0,
) -> ReplicationResult:
    requests = [list(map(str, r)) for r in trace]
    now = [0.0]
    config = MasterConfig.load(
        eviction_policy=policy,
        high_watermark=1.0,
        low_watermark=1.0,
        lease_ttl=1e-6,
        hot_access_rate=hot_rate,
        cool_access_rate=cool_rate,
        heat_half_life=half_life,
        max_hot_replicas=min(max_replicas, nodes),
    )
    state = MasterState(config, clock=lambda: now[0])
    for i in range(nodes):
        state.members.register_client(f"node{i}", f"host{i}")
        state.members.mount_segment(
            MountSegment(f"node{i}", f"node{i}:0", 1, capacity * UNIT, f"host{i}", 1 << 20)
        )
    frequency = Counter(k for r in requests for k in r)
    ranked = [k for k, _ in frequency.most_common(1000)]
    ranks = [r for r in (10, 100, 1000) if r <= len(ranked)]
    rng = Random(seed)
    reads: Counter[int] = Counter()
    hits = blocks = 0
    next_plan = 0.0
    timeline: list[list[float]] = []
    every = max(1, len(requests) // samples)
    for index, (keys, t) in enumerate(zip(requests, timestamps, strict=True)):
        now[0] = t
        matched = state.access.match_prefix(keys)
        for meta in matched:
            reads[rng.choice(meta.replicas).segment.id] += 1
        hits += len(matched)
        blocks += len(keys)
        for key in keys[len(matched) :]:
            if state.puts.put_start("node0", key, UNIT, 0, 1, False) is not None:
                state.puts.put_end("node0", key)
        if t >= next_plan:  # the master's housekeeping period, on trace time
            state.replicator.plan()
            for client in list(state.members.clients):
                for task in state.replicator.tasks_for(client):
                    state.replicator.complete(client, task.task, True)
            next_plan = t + 0.5
        if index % every == 0 or index == len(requests) - 1:
            row = [t]
            for r in ranks:
                held = state.objects.get(ranked[r - 1])
                row.append(float(len(held.replicas)) if held else 0.0)
            timeline.append(row)
    per_node = [reads[s.id] for s in state.space.segments.values()]
    mean = sum(per_node) / len(per_node) if per_node else 0.0
    return ReplicationResult(
        name,
        nodes,
        capacity,
        policy,
        hits / blocks,
        len(requests),
        blocks,
        ranks,
        timeline,
        per_node,
        (max(per_node) / mean) if mean else 0.0,
        state.replicator.copies_done,
        state.replicator.dropped,
    )


def to_json(result: ReplicationResult) -> str:
    return json.dumps(asdict(result))
