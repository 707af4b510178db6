"""`kvstore bench master --shards S`: S master processes (`--shard I --shards S`) and one node joined to
all; each load process routes every key to its shard's master, so every key is put once and found, each
master holding its shard's share; each op reports the CPU the masters and the node spent per key."""

from __future__ import annotations

import json
import os
import time

from kvstore.bench.master_bench import CpuSampler, OpRate, _batches, cpu_seconds
from kvstore.cluster.shards import shard_of
from tests.e2e.test_cli import kvstore


def test_two_shards_put_and_find_every_key_with_the_cpu_each_op_cost() -> None:
    args = ("--objects", "4000", "--batch-size", "500", "--clients", "2", "--shards", "2", "--json")
    result = kvstore("bench", "master", *args, timeout=240)
    assert result.returncode == 0, result.stderr
    *rates, memory = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [(r["op"], r["keys"], r["errors"]) for r in rates] == [
        (op, 8000, 0) for op in ("put", "get", "exists")
    ]
    put = rates[0]
    assert put["master_cpu_us"] > 0 and 0 < put["busiest_master_cpu"] <= 1.5
    assert memory["objects"] == 8000 and {"expire", "scrape_stats"} <= set(memory["task_max_ms"])
    refused = kvstore("bench", "master", "--shards", "257", timeout=60)
    assert refused.returncode != 0 and "--shards is 1..256" in refused.stderr


def test_a_load_process_takes_each_shards_batches_in_turn() -> None:
    keys = [f"bm/c/{i}" for i in range(2500)]
    batches = _batches(keys, 3, 400)
    assert sorted(k for _, part in batches for k in part) == sorted(keys)  # every key once
    assert all(len(part) <= 400 and {shard_of(k, 3) for k in part} == {s} for s, part in batches)
    assert [s for s, _ in batches[:3]] == [0, 1, 2]  # the shards in turn
    assert _batches(keys, 1, 1000) == [(0, keys[:1000]), (0, keys[1000:2000]), (0, keys[2000:])]


def test_the_cpu_an_op_cost_is_read_between_its_start_and_end() -> None:
    with CpuSampler([os.getpid()]) as sampler:
        time.sleep(0.2)
        started = time.time()
        spin = time.process_time() + 0.3
        while time.process_time() < spin:
            pass
        ended = time.time()
        time.sleep(0.2)
    rate = OpRate("put", 1, 0.0, 0.0, 0.0, keys=1000, started=started, ended=ended)
    charged = sampler.charge(rate, masters=1)
    assert 200 <= charged.master_cpu_us <= 450  # 0.3 s of CPU over 1,000 keys, ticks of 10 ms
    # (its share of a core over the span: below 1 when others took the core meanwhile)
    assert 0.2 <= charged.busiest_master_cpu <= 1.2 and charged.node_cpu_us == 0.0
    assert cpu_seconds(os.getpid()) > 0
