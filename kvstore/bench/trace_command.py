"""`kvstore bench trace`: its options and its runs (the replay of a trace through a cache policy, simulated or
in a real store, with a disk tier, the policy bounds, or the hot-block replication simulation); the replays
themselves are kvstore.bench.trace and the modules beside it."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from kvstore import cli_args as arg
from kvstore import cli_flags as flags
from kvstore.cli_flags import add_flags, flag
from transfer_engine.errors import KVStoreError


def add_trace_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="replay a request trace: block hit rate per policy and mode")
    flag("trace", help="FAST'25-format JSONL (hash_ids = prefix-chained blocks)").add(p)
    flag("--nodes", type=arg.positive_int, default=1, help="cache nodes (default 1)").add(p)
    size = p.add_mutually_exclusive_group()
    flag(
        "--capacity-tokens",
        type=_counts,
        help="per node; with --plot, a comma list of the capacities plotted",
    ).add(size)
    flag(
        "--capacity-blocks",
        type=_counts,
        help="per node (default 10000); with --plot, a comma list of the capacities plotted (one value: "
        "0.1x to 10x of it, the value itself marked)",
    ).add(size)
    add_flags(
        p,
        flag("--block-tokens", type=arg.positive_int, default=512, help="tokens per block (default 512)"),
        flag("--policy", default="adaptive", help="eviction policy, or a comma list (with --plot)"),
        flag(
            "--mode",
            choices=["global", "local"],
            default="global",
            help="global: one pool over the nodes (default); local: a cache per node, requests routed",
        ),
        flag("--route", choices=["longest", "balanced"], default="longest", help="local mode routing"),
        flag("--payload-bytes", type=arg.size, default=1024, help="object size without --simulate"),
        flag("--simulate", action="store_true", help="run the policy without moving data (fast)"),
        flags.PLOT.but(
            metavar="PNG",
            help="plot hit rate vs capacity for the policies (simulated) at the --capacity-* values",
        ),
        flags.LIMIT.but(help="replay only the first N requests"),
        flag(
            "--replication",
            action="store_true",
            help="global + simulated: hot-block replication on trace time (Figure 11 data)",
        ),
        flag(
            "--hot-rate",
            type=arg.positive_float,
            default=0.005,
            help="reads/s (trace time) that make a block hot",
        ),
        flags.HEAT_HALF_LIFE.but(default=600.0, help="seconds of trace time"),
        flag(
            "--max-replicas",
            type=arg.positive_int,
            default=3,
            help="with --replication: copies a hot block grows to",
        ),
        flag(
            "--disk-capacity-blocks",
            type=arg.positive_int,
            help="per node: a disk tier under the memory one (--capacity-*); hits split into memory and disk",
        ),
        flag(
            "--promote-window",
            type=arg.non_negative_float,
            default=600.0,
            help="with a disk tier: a disk block read twice within this many trace seconds moves to memory",
        ),
        flag(
            "--bounds",
            action="store_true",
            help="what any online policy could reach at this capacity (offline optimum, oracles, fitted "
            "ranking)",
        ),
        flags.JSON.but(help="one JSON object per result"),
    )


def _counts(text: str) -> int | tuple[int, ...]:
    """N, or N,N,... (several capacities, for --plot)."""
    counts = tuple(arg.positive_int(part.strip()) for part in text.split(","))
    return counts[0] if len(counts) == 1 else counts


def _capacities(args: argparse.Namespace) -> list[int]:
    """The capacities per node, in blocks, that --capacity-blocks or --capacity-tokens asked for."""
    given = args.capacity_blocks or args.capacity_tokens or 10000
    counts = list(given) if isinstance(given, tuple) else [given]
    if args.capacity_tokens and not args.capacity_blocks:
        counts = [tokens // args.block_tokens for tokens in counts]
    if min(counts) <= 0:
        raise KVStoreError("capacity is smaller than one block")
    if len(counts) > 1 and not args.plot:
        raise KVStoreError("several capacities are for --plot; a replay runs at one")
    return counts


def run_trace_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import trace as tr

    policies = tr.policy_names(args.policy)
    capacities = _capacities(args)
    capacity = capacities[0]
    requests, times = tr.load_timed_trace(args.trace, args.limit)
    name = Path(args.trace).name
    if args.replication:
        return _run_replication_sim(args, requests, times, capacity, policies[0], name)
    if args.bounds:
        return _run_bounds(args, requests, capacity, name)
    results: list[tr.TraceResult] = []
    if args.disk_capacity_blocks:
        if args.plot or (not args.simulate and args.mode != "global"):
            raise KVStoreError(
                "--disk-capacity-blocks: no --plot; a real replay (no --simulate) is global only"
            )
        from kvstore.bench.tiered_replay import replay_real_tiered, simulate_tiered

        for policy in policies:
            if not args.simulate:
                results.append(
                    replay_real_tiered(
                        requests,
                        capacity,
                        args.disk_capacity_blocks,
                        policy,
                        args.payload_bytes,
                        name,
                        times,
                    )
                )
                continue
            results.append(
                simulate_tiered(
                    requests,
                    capacity,
                    args.disk_capacity_blocks,
                    policy,
                    args.mode,
                    args.nodes,
                    name,
                    args.route,
                    times,
                    args.promote_window,
                )
            )
    elif args.plot:
        one = len(capacities) == 1  # a sweep around it, the capacity asked for marked
        sweep = sorted({max(1, int(capacity * f)) for f in (0.1, 0.3, 1, 3, 10)}) if one else capacities
        where = tr.PlotPlace(args.plot, name, capacity if one else None)
        results = tr.plot(requests, sweep, policies, args.mode, args.nodes, where, args.route)
    else:
        for policy in policies:
            if args.simulate:
                results.append(
                    tr.simulate(requests, capacity, policy, args.mode, args.nodes, name, args.route)
                )
            else:
                results.append(
                    tr.replay_real(
                        requests,
                        capacity,
                        policy,
                        args.mode,
                        args.nodes,
                        args.payload_bytes,
                        name,
                        args.route,
                    )
                )
    for r in results:
        if args.json:
            print(tr.to_json(r))
        else:
            kind = "simulated" if r.simulate else "real store"
            print(
                f"{r.trace} {r.mode:6} nodes={r.nodes} capacity={r.capacity_blocks:>7}/node "
                f"policy={r.policy:9} hit_rate={r.hit_rate:.3f} evictions={r.evictions} ({kind})"
            )
            if r.disk_capacity_blocks:
                print(
                    f"  with disk={r.disk_capacity_blocks}/node: memory hits {r.memory_hits / r.blocks:.3f}, "
                    f"disk hits {r.disk_hits / r.blocks:.3f} of blocks; demotions {r.demotions}, "
                    f"promotions {r.promotions}"
                )
    if args.plot and not args.json:
        plotted = ", ".join(str(c) for c in sorted({r.capacity_blocks for r in results}))
        asked = f"; {capacity} asked, marked" if len(capacities) == 1 else ""
        print(f"plot written to {args.plot} (capacities per node in blocks: {plotted}{asked})")
    return 0


def _run_bounds(args: argparse.Namespace, requests: list[list[int]], capacity: int, name: str) -> int:
    from kvstore.bench import policy_bounds

    b = policy_bounds.bounds(requests, capacity)
    if args.json:
        print(json.dumps({"trace": name, **dataclasses.asdict(b)}))
        return 0
    print(f"{name}: one cache of {capacity} blocks, block hit rate")
    for label, value in [
        ("lru", b.lru),
        ("adaptive (default)", b.adaptive),
        ("ranking by (turn, last block, age), fitted on the whole trace", b.fitted_ranking),
        ("lru told which blocks are never used again", b.dead_block_oracle),
        ("offline optimum (Belady)", b.optimum),
    ]:
        print(f"  {value:.3f}  {label}")
    print(
        "requests continued later, by turn: "
        + ", ".join(f"{turn}: {p:.2f} of {n}" for turn, (n, p) in b.continuation_odds.items())
    )
    return 0


def _run_replication_sim(
    args: argparse.Namespace,
    requests: list[list[int]],
    times: list[float],
    capacity: int,
    policy: str,
    name: str,
) -> int:
    from kvstore.bench import replication_sim as rs

    result = rs.simulate_replication(
        requests,
        times,
        args.nodes,
        capacity,
        policy,
        args.hot_rate,
        args.hot_rate / 10,
        args.heat_half_life,
        args.max_replicas,
        name=name,
    )
    if args.json:
        print(rs.to_json(result))
        return 0
    print(
        f"{name} global nodes={result.nodes} capacity={capacity}/node policy={policy} "
        f"hit_rate={result.hit_rate:.3f} copies={result.copies} dropped={result.dropped}"
    )
    print("replicas over time (trace seconds: " + ", ".join(f"#{r} most used" for r in result.ranks) + ")")
    for row in result.timeline:
        print(f"  t={row[0]:8.0f}s  " + "  ".join(f"{int(x)}" for x in row[1:]))
    print(f"reads per node: {result.reads_per_node}  (max/mean {result.read_imbalance:.2f})")
    return 0
