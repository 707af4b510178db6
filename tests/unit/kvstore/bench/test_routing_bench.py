"""The routing bench's simulation: on a trace of conversations that come back, routing by the index
finds more of each prompt on the chosen instance's GPU than round-robin does, and the store serves the
rest of the shared prefixes."""

from __future__ import annotations

import random

from kvstore.bench.routing import TtftModel, query_rate, simulate
from kvstore.bench.trace import TraceRecord


def conversations(n: int = 400, users: int = 24) -> list[TraceRecord]:
    """Each user's turns extend that user's own prefix by a block; requests a second apart."""
    rng = random.Random(7)
    prefixes: dict[int, list[int]] = {}
    out = []
    for i in range(n):
        user = rng.randrange(users)
        blocks = prefixes.setdefault(user, [])
        blocks.append(i)  # (a new block id per request)
        out.append(TraceRecord(list(blocks), float(i), 512 * len(blocks), 16))
    return out


def test_prefix_routing_finds_more_on_the_gpu_than_round_robin() -> None:
    trace = conversations()
    model = TtftModel(prefill_s_per_token=1e-5, block_load_s=0.004)
    rr = simulate(trace, "round-robin", 8, 64, model, store=False)
    prefix = simulate(trace, "prefix", 8, 64, model, store=False)
    assert prefix.gpu_hit_rate > rr.gpu_hit_rate + 0.3
    assert prefix.ttft_mean_s < rr.ttft_mean_s
    with_store = simulate(trace, "round-robin", 8, 64, model, store=True)
    assert with_store.gpu_hit_rate + with_store.store_hit_rate > rr.gpu_hit_rate + 0.3  # shared pool


def test_the_index_answers_matches_at_a_measurable_rate() -> None:
    assert query_rate(conversations(100), 64, blocks_per_query=4, seconds=0.1) > 0
