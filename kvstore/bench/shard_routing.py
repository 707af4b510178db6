"""How a key space split over several masters would route a real trace (the design in bench/README.md,
"Beyond one master"): per request, how many masters its lookup must ask, and how evenly the lookups fall.

    python -m kvstore.bench.shard_routing [TRACE.jsonl] [--shards 2,4,8,16] [--depths 0,1,2,4]

Each request of a Mooncake-format trace (JSONL with `hash_ids`, prefix-chained blocks) looks up all its
blocks. A block at depth i (its position in the chain) is routed to shard H(block at depth min(i, d)) mod
S: d = 0 hashes every key by itself; d >= 1 sends a chain's blocks past depth d to the shard of its
depth-d ancestor (known to any client that asks, since a block's id fixes its whole prefix), so the hot
shared heads (depth < d) spread by their own ids and a request asks at most d + 1 masters. Prints one
JSON line per (shards, depth): masters asked per request (mean, p99), and the busiest master's share of
all key lookups against an even 1/S ("imbalance" = busiest / mean).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import xxhash

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "traces" / "conversation_trace.jsonl"
)


def load(path: Path) -> list[list[int]]:
    chains = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            try:
                ids = json.loads(line)["hash_ids"]
            except (ValueError, KeyError, TypeError) as exc:
                raise SystemExit(f"{path}:{number}: not a trace line with hash_ids ({exc})") from None
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise SystemExit(f"{path}:{number}: hash_ids must be a list of integers")
            if ids:
                chains.append(ids)
    if not chains:
        raise SystemExit(f"{path}: no requests")
    return chains


def shard_of(block: int, shards: int) -> int:
    return xxhash.xxh3_64_intdigest(block.to_bytes(8, "little", signed=True)) % shards


def route(chains: list[list[int]], shards: int, depth: int) -> dict[str, float]:
    asked = np.empty(len(chains))
    load: Counter[int] = Counter()
    for n, chain in enumerate(chains):
        owners = [shard_of(chain[min(i, depth)] if depth else block, shards) for i, block in enumerate(chain)]
        load.update(owners)
        asked[n] = len(set(owners))
    per_shard = np.array([load[s] for s in range(shards)], dtype=float)
    return {
        "shards": shards,
        "depth": depth,
        "requests": len(chains),
        "masters_per_request_mean": float(asked.mean()),
        "masters_per_request_p99": float(np.percentile(asked, 99)),
        "busiest_share": float(per_shard.max() / per_shard.sum()),
        "imbalance": float(per_shard.max() / per_shard.mean()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", default=os.environ.get("TRACE", str(DEFAULT_TRACE)))
    p.add_argument("--shards", default="2,4,8,16")
    p.add_argument("--depths", default="0,1,2,4")
    args = p.parse_args()
    try:
        shard_counts = [int(s) for s in args.shards.split(",")]
        depths = [int(d) for d in args.depths.split(",")]
    except ValueError:
        p.error("--shards and --depths take comma lists of integers")
    if min(shard_counts) < 1 or min(depths) < 0:
        p.error("shards must be >= 1 and depths >= 0")
    chains = load(Path(args.trace))
    for shards in shard_counts:
        for depth in depths:
            print(json.dumps(route(chains, shards, depth)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
