"""`kvstore bench trace --bounds`: how much better than LRU any online policy could do on a trace.

A policy can only rank blocks by what it has seen. This module measures, on one trace:
- `optimum`: the offline optimum (evict the block used furthest in the future; Belady);
- `dead_block_oracle`: LRU told exactly which blocks will never be used again, the best case of any
  admission or dead-block predictor that keeps LRU order;
- `fitted_ranking`: a ranking by (block class, idle age) with reuse statistics fitted on the whole trace
  in advance: what a policy learning from those features (turn of the conversation, last block of a
  request, recency), LHD-style, could reach at best. (Admission rules such as `adaptive`'s second-sight
  use another signal and beat it at small capacities, not at 10k blocks on the shipped trace.)
- `continuation_odds`: how often a request is continued by a later one, by turn: the one signal those
  features carry.
When the fitted ranking lands near LRU while the oracles are far above, the missing hits depend on which
conversations come back, which nothing in the key stream predicts.
"""

from __future__ import annotations

import heapq
import random
from collections import OrderedDict, defaultdict
from dataclasses import dataclass

import numpy as np

from kvstore.bench.trace import Trace, leading_run, simulate

_NEVER = 1 << 62
_TURN_CLASSES = 5  # turns 1..4 and 5+
_AGE_BUCKETS = 200
_CANDIDATES = 64  # sampled per eviction, as Redis and LHD do


def _next_uses(trace: Trace) -> list[list[int]]:
    """For every reference (request i, position j): the index of the next reference to the same block."""
    following: dict[int, int] = {}
    result: list[list[int]] = [[] for _ in trace]
    ref = sum(len(ids) for ids in trace)
    for i in range(len(trace) - 1, -1, -1):
        row = []
        for k in reversed(trace[i]):
            ref -= 1
            row.append(following.get(k, _NEVER))
            following[k] = ref
        row.reverse()
        result[i] = row
    return result


def optimum(trace: Trace, capacity: int) -> float:
    """Belady: evict the present block whose next use is furthest away."""
    nexts = _next_uses(trace)
    present: dict[int, int] = {}
    heap: list[tuple[int, int]] = []
    hits = total = 0
    for ids, row in zip(trace, nexts, strict=True):
        hits += leading_run(ids, present)
        total += len(ids)
        for k, nxt in zip(ids, row, strict=True):
            present[k] = nxt
            heapq.heappush(heap, (-nxt, k))
        while len(present) > capacity:
            nxt, k = heapq.heappop(heap)
            if present.get(k) == -nxt:  # entries of re-referenced blocks are stale
                del present[k]
    return hits / total if total else 0.0


def dead_block_oracle(trace: Trace, capacity: int) -> float:
    """LRU that keeps a block only if it will be used again."""
    order: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for ids, row in zip(trace, _next_uses(trace), strict=True):
        hits += leading_run(ids, order)
        total += len(ids)
        for k, nxt in zip(ids, row, strict=True):
            order.pop(k, None)
            if nxt != _NEVER:
                order[k] = None
        while len(order) > capacity:
            order.popitem(last=False)
    return hits / total if total else 0.0


def continuations(trace: Trace) -> tuple[list[int], list[bool]]:
    """Each request's turn and whether a later request continues it. Request i continues j when j's
    blocks but its last (a partial block changes as the conversation grows), and at least two, are a
    prefix of i's (one shared first block is a system prompt, not a conversation). Keys are
    prefix-chained, so that prefix is named by one block of j's."""
    ends: dict[int, int] = {}  # block naming a continuable prefix -> latest request with it
    turn = [1] * len(trace)
    continued = [False] * len(trace)
    for i, ids in enumerate(trace):
        parent = None
        for k in ids:
            if k in ends:
                parent = ends[k]
        if parent is not None:
            turn[i] = turn[parent] + 1
            continued[parent] = True
        if len(ids) >= 2:
            ends[ids[max(1, len(ids) - 2)]] = i
    return turn, continued


def continuation_odds(trace: Trace) -> dict[str, tuple[int, float]]:
    """turn -> (requests, fraction continued later)."""
    turn, continued = continuations(trace)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for t, c in zip(turn, continued, strict=True):
        row = counts[str(t) if t < _TURN_CLASSES else f"{_TURN_CLASSES}+"]
        row[0] += 1
        row[1] += c
    return {k: (n, yes / n) for k, (n, yes) in sorted(counts.items())}


def _block_classes(trace: Trace) -> list[list[int]]:
    turn, _ = continuations(trace)
    return [
        [0 if (j == len(ids) - 1 and j > 0) else min(turn[i], _TURN_CLASSES) for j in range(len(ids))]
        for i, ids in enumerate(trace)
    ]


def _reuse_histogram(trace: Trace, classes: list[list[int]], bucket: int) -> np.ndarray:
    """hist[class, age] = references whose next use came `age` buckets later (last column: never)."""
    hist = np.zeros((_TURN_CLASSES + 1, _AGE_BUCKETS + 1))
    last: dict[int, tuple[int, int]] = {}
    ref = 0
    for ids, row in zip(trace, classes, strict=True):
        for k, c in zip(ids, row, strict=True):
            if k in last:
                when, was = last[k]
                hist[was, min((ref - when) // bucket, _AGE_BUCKETS)] += 1
            last[k] = (ref, c)
            ref += 1
    for _when, was in last.values():
        hist[was, _AGE_BUCKETS] += 1  # never used again
    return hist


def _reuse_scores(hist: np.ndarray, horizon: int) -> np.ndarray:
    """scores[class, age] = P(next use within `horizon` age buckets | idle for `age` buckets)."""
    alive = np.cumsum(hist[:, ::-1], axis=1)[:, ::-1][:, :_AGE_BUCKETS]  # still waiting at each age
    used = np.concatenate([np.zeros((hist.shape[0], 1)), np.cumsum(hist[:, :_AGE_BUCKETS], axis=1)], axis=1)
    ages = np.arange(_AGE_BUCKETS)
    within = used[:, np.minimum(ages + horizon, _AGE_BUCKETS)] - used[:, ages]
    return np.divide(within, alive, out=np.zeros_like(within), where=alive > 0)


def _ranked_run(
    trace: Trace, classes: list[list[int]], scores: np.ndarray, capacity: int, bucket: int
) -> float:
    rnd = random.Random(1)
    state: dict[int, tuple[int, int]] = {}  # block -> (last reference, class)
    keys: list[int] = []
    slot: dict[int, int] = {}
    hits = total = ref = 0
    for ids, row in zip(trace, classes, strict=True):
        hits += leading_run(ids, state)
        total += len(ids)
        for k, c in zip(ids, row, strict=True):
            if k not in state:
                slot[k] = len(keys)
                keys.append(k)
            state[k] = (ref, c)
            ref += 1
        while len(keys) > capacity:
            victim, lowest = keys[0], 2.0
            for _ in range(_CANDIDATES):
                k = keys[rnd.randrange(len(keys))]
                when, c = state[k]
                score = scores[c, min((ref - when) // bucket, _AGE_BUCKETS - 1)]
                if score < lowest:
                    victim, lowest = k, score
            i, moved = slot.pop(victim), keys.pop()
            if moved != victim:
                keys[i], slot[moved] = moved, i
            del state[victim]
    return hits / total if total else 0.0


def fitted_ranking(trace: Trace, capacity: int) -> float:
    """The best, over three horizons, of ranking by fitted (class, age) reuse odds."""
    classes = _block_classes(trace)
    bucket = max(1, capacity // 20)
    hist = _reuse_histogram(trace, classes, bucket)
    return max(_ranked_run(trace, classes, _reuse_scores(hist, h), capacity, bucket) for h in (10, 20, 40))


@dataclass
class Bounds:
    capacity_blocks: int
    lru: float
    adaptive: float
    fitted_ranking: float
    dead_block_oracle: float
    optimum: float
    continuation_odds: dict[str, tuple[int, float]]


def bounds(trace: Trace, capacity: int) -> Bounds:
    return Bounds(
        capacity,
        simulate(trace, capacity, "lru").hit_rate,
        simulate(trace, capacity, "adaptive").hit_rate,
        fitted_ranking(trace, capacity),
        dead_block_oracle(trace, capacity),
        optimum(trace, capacity),
        continuation_odds(trace),
    )
