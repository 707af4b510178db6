"""The `kvstore bench` command group: each bench's options and the call that runs it (`kvstore bench` alone:
the store and transfer summary)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from kvstore import cli_args as arg
from kvstore import cli_flags as flags
from kvstore.bench.trace_command import add_trace_bench, run_trace_bench
from kvstore.cli_flags import add_flags, flag
from transfer_engine.errors import AddressInUseError, KVStoreError

Runner = Callable[[argparse.Namespace], int]


def add_bench_commands(commands: argparse._SubParsersAction) -> dict[str | None, Runner]:
    """Adds `kvstore bench` and its benches; returns each bench's runner by name (None: the summary)."""
    bench = commands.add_parser("bench", help="benchmarks (no subcommand: store + transfer summary)")
    flags.DURATION.but(default=3.0, help="seconds per measurement").add(bench)
    benches = bench.add_subparsers(dest="bench")
    _add_transfer_bench(benches)
    _add_store_bench(benches)
    _add_master_bench(benches)
    _add_allocator_bench(benches)
    _add_connector_bench(benches)
    _add_tier_bench(benches)
    add_trace_bench(benches)
    _add_routing_bench(benches)
    return {
        "transfer": _run_transfer_bench,
        "store": _run_store_bench,
        "master": _run_master_bench,
        "allocator": _run_allocator_bench,
        "connector": _run_connector_bench,
        "tier": _run_tier_bench,
        "trace": run_trace_bench,
        "routing": _run_routing_bench,
        None: _run_default_bench,
    }


def _add_transfer_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transfer", help="transfer engine bandwidth and latency vs the machine baseline")
    add_flags(
        p,
        flags.TRANSPORT,
        flag(
            "--op", choices=["read", "write"], default="read", help="what the initiator does (default read)"
        ),
        flag("--block-size", type=arg.size, default=1 << 20, help="bytes per request (e.g. 1MiB)"),
        flags.BATCH_SIZE.but(default=16, help="requests per batch (default 16)"),
        flag("--threads", type=arg.positive_int, default=1, help="initiator threads (default 1)"),
        flag("--connections", type=arg.positive_int, help="TCP connections per peer (default 2)"),
        flags.DURATION.but(default=5.0, help="seconds measured"),
        flag("--working-set", type=arg.size, default=512 << 20, help="bytes cycled on each side"),
        flag(
            "--mode",
            choices=["initiator", "target"],
            default="initiator",
            help="initiator: measure (default); target: only serve a segment for a --peer elsewhere",
        ),
        flag("--peer", type=arg.host_port, help="target segment HOST:PORT (default: start one here)"),
        flags.HOST.but(help="address this side listens on (default 127.0.0.1)"),
        flags.PORT.but(default=0, help="target mode: port to listen on"),
        flag("--no-baseline", action="store_true", help="skip the baseline measurement"),
        flags.NICS.but(
            help="NICs this side may use: names (eth0,eth1) or ^names to leave out (default: KVSTORE_NICS); "
            "with several, the JSON and the table give what each path moved"
        ),
        flags.GPU.but(
            help="both sides in GPU 0 memory (same host: cuda_ipc), beside device-to-device cuMemcpyAsync"
        ),
        flags.JSON.but(help="print exactly one JSON object"),
    )


def _run_transfer_bench(args: argparse.Namespace) -> int:
    from transfer_engine import bench

    cfg = bench.TransferBenchConfig(
        transport=args.transport,
        op=args.op,
        block_size=args.block_size,
        batch_size=args.batch_size,
        threads=args.threads,
        connections=args.connections,
        duration=args.duration,
        working_set=args.working_set,
        peer=args.peer,
        host=args.host,
        baseline=not args.no_baseline,
        gpu=args.gpu,
        nics=args.nics,
    )
    try:
        return bench.main(cfg, args.mode, args.port, args.json)
    except AddressInUseError as exc:  # (target mode: --port, not the engine's own variable, chose it)
        raise exc.naming("--port") if args.port and exc.port == args.port else exc from None


def _add_store_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("store", help="store put/get/exists throughput and latency, cross-process")
    add_flags(
        p,
        flags.VALUE_SIZE.but(default=512 << 10),
        flags.BATCH_SIZE.but(default=32),
        flags.OPS.but(help="comma list of put, get, exists"),
        flags.DURATION.but(default=5.0, help="seconds per op"),
        flags.CLIENTS.but(help="client processes"),
        flags.TRANSPORT,
        flags.BENCH_MASTER,
        flags.BENCH_SEGMENT,
        flags.LOAD_MODE,
        flags.JSON.but(help="one JSON object per op, one per line"),
        flags.MOONCAKE.but(
            help="also measure Mooncake's store (master, storage process, client; put and get over TCP) "
            "with this Python (an environment with mooncake-transfer-engine-non-cuda; "
            "kvstore.bench.mooncake_bench)"
        ),
        flag(
            "--rounds",
            type=arg.positive_int,
            default=1,
            help="with --mooncake: alternate ours and theirs N times",
        ),
    )


# Our row that does the same work as each of Mooncake's: its client asks the master for every get (it
# keeps no leases), so its get stands beside our get_uncached (its single get beside our
# get_single_uncached); our leased gets have their own rows.
_LIKE_MOONCAKE = {"get": "get_uncached", "get_single": "get_single_uncached"}


def _run_store_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import store_bench

    cfg = store_bench.StoreBenchConfig(
        value_size=args.value_size,
        batch_size=args.batch_size,
        ops=tuple(o.strip() for o in args.ops.split(",") if o.strip()),
        duration=args.duration,
        clients=args.clients,
        transport=args.transport,
        master=args.master,
        segment_size=args.segment_size,
    )
    if args.mode == "client":
        if not args.master:
            raise KVStoreError("client mode needs --master")
        return store_bench.client_main(cfg, args.master)
    from kvstore.bench import report

    cfg.validate()
    ok = True
    for _ in range(args.rounds if args.mooncake else 1):
        results = report.with_progress(lambda advance: store_bench.run(cfg, advance), len(cfg.ops) + 2)
        ok = ok and all(r.errors == 0 for r in results)
        theirs = store_bench.run_mooncake(cfg, args.mooncake) if args.mooncake else []
        if args.json:
            for r in results:
                print(json.dumps(dataclasses.asdict(r)))
            for row in theirs:
                print(json.dumps(row))
        else:
            report.store_table(results)
            for row in theirs:
                ours = next(
                    (
                        r
                        for r in results
                        if r.op == _LIKE_MOONCAKE.get(row["op"], row["op"])
                        and r.transport == row["transport"]
                    ),
                    None,
                )
                versus = (
                    f"  kvstore {ours.op}/Mooncake {ours.ops_per_s / row['ops_per_s']:.2f}x" if ours else ""
                )
                print(
                    f"Mooncake {row['op']:4} {row['ops_per_s']:>12,.0f} ops/s {row['gbps']:7.2f} GB/s "
                    f"p50 {row['p50_us']:8.0f} us p99 {row['p99_us']:8.0f} us{versus}"
                )
    return 0 if ok else 1


def _add_routing_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "routing", help="replay a trace over simulated instances: round-robin, least-loaded, prefix-aware"
    )
    add_flags(
        p,
        flag("trace", help="FAST'25-format JSONL (hash_ids = prefix-chained 512-token blocks)"),
        flag(
            "--instances", type=arg.positive_int, default=8, help="engine instances routed over (default 8)"
        ),
        flag(
            "--gpu-blocks", type=arg.positive_int, default=600, help="blocks each instance's GPU cache holds"
        ),
        flags.LIMIT.but(help="first N requests only"),
        flag(
            "--speedup", type=arg.positive_float, default=1.0, help="divide the trace's inter-arrival times"
        ),
        flag(
            "--prefill-tokens-per-s",
            type=arg.positive_float,
            default=10_000.0,
            help="an instance's prefill rate (uncached tokens a second)",
        ),
        flag(
            "--block-bytes",
            type=arg.size,
            default=64 << 20,
            help="KV bytes of one 512-token block (default: Llama-3-8B in bf16)",
        ),
        flag(
            "--store-gbps",
            type=arg.positive_float,
            help="store read bandwidth (default: measured here, with its in-run baseline)",
        ),
        flag("--no-store", action="store_true", help="instances have only their GPU caches"),
        flags.JSON.but(help="one JSON object per policy, one per line"),
        flags.PLOT.but(help="save hit rates and TTFT per policy as a PNG here"),
    )


def _run_routing_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import routing
    from kvstore.bench.trace import load_records

    records = load_records(args.trace, args.limit)
    store_gbps, baseline, kind = args.store_gbps, None, None
    if store_gbps is None and not args.no_store:
        store_gbps, baseline, kind = routing.measure_store()
    model = routing.TtftModel(
        prefill_s_per_token=1.0 / args.prefill_tokens_per_s,
        block_load_s=args.block_bytes / (store_gbps * 1e9) if store_gbps else 0.0,
    )
    results = [
        routing.simulate(
            records, policy, args.instances, args.gpu_blocks, model, not args.no_store, args.speedup
        )
        for policy in routing.POLICIES
    ]
    rate = routing.query_rate(records, args.gpu_blocks)
    context = {
        "trace": Path(args.trace).name,
        "store_gbps": store_gbps,
        "store_baseline_gbps": baseline,
        "store_baseline_kind": kind,
        "index_queries_per_s": rate,
    }
    if args.json:
        for r in results:
            print(json.dumps({**context, **dataclasses.asdict(r)}))
    else:
        store = "off" if args.no_store else f"{store_gbps:.2f} GB/s"
        if baseline:
            store += f" (in-run {kind} baseline {baseline:.2f} GB/s)"
        print(
            f"{context['trace']}: {len(records)} requests, {args.instances} instances x {args.gpu_blocks} "
            f"GPU blocks, prefill {args.prefill_tokens_per_s:,.0f} tokens/s, store {store}"
        )
        print(f"{'policy':14} {'GPU hit':>8} {'store hit':>9} {'TTFT mean':>10} {'p50':>8} {'p90':>8} "
              f"{'p99':>8} {'busiest':>8}")  # fmt: skip
        for r in results:
            print(
                f"{r.policy:14} {r.gpu_hit_rate:8.1%} {r.store_hit_rate:9.1%} {r.ttft_mean_s:9.3f}s "
                f"{r.ttft_p50_s:7.3f}s {r.ttft_p90_s:7.3f}s {r.ttft_p99_s:7.3f}s {r.busiest_share:8.1%}"
            )
        print(f"index: {rate:,.0f} matches/s of 32 blocks on one core (no HTTP)")
    if args.plot:
        routing.plot(results, args.plot, f"{context['trace']}: {args.instances} instances")
        if not args.json:
            print(f"plot saved to {args.plot}")
    return 0


def _add_master_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("master", help="the master's own put/get/exists rates (RPC load, no data moved)")
    add_flags(
        p,
        flag("--objects", type=arg.positive_int, default=200_000, help="objects each client puts"),
        flags.BATCH_SIZE.but(default=1000, help="keys per request"),
        flags.VALUE_SIZE.but(default=1024, help="the size each put declares"),
        flags.CLIENTS.but(help="load processes, run at once"),
        flags.OPS.but(help="comma list of put, get, exists (put first)"),
        flag(
            "--pipeline",
            type=arg.positive_int,
            default=1,
            help="requests each load process keeps in flight (threads, a connection each; default 1)",
        ),
        flag(
            "--shards",
            type=arg.positive_int,
            default=1,
            help="masters the key space is split over (a process each; one node joined to all), each key "
            "routed to its shard's master (default 1)",
        ),
        flags.MOONCAKE.but(
            help="also measure Mooncake's master in the same shape, with this Python (of a virtual "
            "environment with mooncake-transfer-engine-non-cuda; kvstore.bench.mooncake_bench says how to "
            "make one)"
        ),
        flags.BENCH_MASTER.but(help=argparse.SUPPRESS),  # the load processes' master
        flags.LOAD_MODE,
        flags.JSON.but(help="one JSON object per line"),
    )


def _run_master_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import master_bench

    cfg = master_bench.MasterBenchConfig(
        objects=args.objects,
        batch_size=args.batch_size,
        value_size=args.value_size,
        clients=args.clients,
        ops=tuple(o.strip() for o in args.ops.split(",") if o.strip()),
        pipeline=args.pipeline,
        shards=args.shards,
    )
    cfg.validate()
    if args.mode == "client":
        if not args.master:
            raise KVStoreError("client mode needs --master")
        return master_bench.client_main(cfg, args.master)
    from kvstore.bench import report

    rates, memory = report.with_progress(
        lambda advance: master_bench.run(cfg, advance), len(cfg.ops) + 2, "master bench"
    )
    theirs = master_bench.run_mooncake(cfg, args.mooncake) if args.mooncake else None
    if args.json:
        for r in rates:
            print(json.dumps(dataclasses.asdict(r)))
        print(json.dumps(dataclasses.asdict(memory)))
        if theirs is not None:  # the same lines, marked as Mooncake's
            for r in theirs[0]:
                print(json.dumps({"system": "mooncake", **dataclasses.asdict(r)}))
            print(json.dumps({"system": "mooncake", **dataclasses.asdict(theirs[1])}))
    else:
        report.master_table(rates, memory, theirs)
    return 0 if all(r.errors == 0 for r in rates) else 1


def _add_connector_bench(sub: argparse._SubParsersAction) -> None:
    from kvstore.bench.models import CASES, HYBRID_MODELS, MODELS

    p = sub.add_parser(
        "connector",
        help="engine connector save/load vs the store's own batch put/get",
        description="Saves and loads requests' KV blocks through a connector's data path and, alternating "
        "with it, the same bytes as the same objects through the store's own batch put/get. Cases: dense "
        "(a dense model at TP=1: vLLM's head-slice members of each block, or SGLang's one object per page; "
        "--engine vllm or sglang); hybrid (the vLLM connector on a Gemma-3-style "
        "model: every KV cache group's blocks saved as store groups of head-slice members, loads reading "
        "what vLLM's rule needs, the window groups' last blocks only); tp-mismatch (the vLLM connector's "
        "head-slice members written by --write-tp ranks, read by --read-tp ranks, each moving its heads).",
    )
    add_flags(
        p,
        flag("--case", choices=CASES, default="dense", help="what to move (default dense)"),
        flag(
            "--engine",
            choices=["vllm", "sglang"],
            default="vllm",
            help="dense: whose connector (the others: vllm)",
        ),
        flag(
            "--model",
            choices=sorted({*MODELS, *HYBRID_MODELS}),
            help="KV geometry (default llama3-8b; hybrid: gemma3-4b, or another hybrid model)",
        ),
        flag("--blocks", type=arg.positive_int, default=32, help="blocks (pages) per request"),
        flag("--requests", type=arg.positive_int, default=20, help="requests saved and loaded"),
        flag(
            "--window",
            type=arg.positive_int,
            default=128,
            help="hybrid: sliding window in tokens (default 128: a quarter of a 32-block request, as "
            "Gemma 3's 1024 is of a 4096-token prompt)",
        ),
        flag("--write-tp", type=arg.positive_int, default=2, help="tp-mismatch: TP ranks that save (2)"),
        flag("--read-tp", type=arg.positive_int, default=4, help="tp-mismatch: TP ranks that load (4)"),
        flags.BENCH_MASTER,
        flags.BENCH_SEGMENT,
        flags.JSON.but(help="one JSON object"),
    )


def _run_connector_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import connector_bench, store_bench
    from kvstore.bench.models import MODELS

    if args.case == "dense" and args.model not in (None, *MODELS):
        raise KVStoreError(f"the dense case needs a dense model ({', '.join(MODELS)}), not {args.model}")
    if args.case != "dense" and args.engine != "vllm":
        raise KVStoreError(f"the {args.case} case follows the vLLM connector (--engine vllm)")
    if args.case != "dense":  # a model or TP size the case cannot run is refused before a cluster starts
        from kvstore.bench import connector_cases

        connector_cases.plan_case(args.case, args.model, args.window, args.write_tp, args.read_tp)

    def bench(master: str) -> connector_bench.ConnectorBenchResult:
        if args.case == "dense" and args.engine == "sglang":
            model = args.model or "llama3-8b"
            return connector_bench.run(master, args.engine, model, args.blocks, args.requests)
        if args.case == "dense":  # vLLM: the connector's own data path, head-slice members, at TP=1
            from kvstore.bench import connector_cases

            r = connector_cases.run_case(
                master,
                "tp-mismatch",
                args.model or "llama3-8b",
                args.blocks,
                args.requests,
                write_tp=1,
                read_tp=1,
            )
            return dataclasses.replace(r, case="dense")
        from kvstore.bench import connector_cases

        return connector_cases.run_case(
            master,
            args.case,
            args.model,
            args.blocks,
            args.requests,
            args.window,
            args.write_tp,
            args.read_tp,
        )

    if args.master:
        r = bench(args.master)
    else:
        with store_bench.process_cluster(args.segment_size) as (master, _pid):
            r = bench(master)
    if args.json:
        print(
            json.dumps(
                {**dataclasses.asdict(r), "save_overhead": r.save_overhead, "load_overhead": r.load_overhead}
            )
        )
    else:
        connector_bench.print_result(r)
    return 0 if r.errors == 0 else 1


def _add_tier_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tier", help="a memory tier's put/get beside the same device's own baseline")
    add_flags(
        p,
        flag("--tier", choices=["disk", "pinned", "gpu"], default="disk", help="disk, pinned or gpu"),
        flags.GPU.but(dest="tier", action="store_const", const="gpu", help="the same as --tier gpu"),
        flag("--dir", default=".", help="where the disk file goes (its file system is measured)"),
        flags.VALUE_SIZE.but(default=1 << 20),
        flags.BATCH_SIZE.but(default=32),
        flag("--total", type=arg.size, default=512 << 20, help="bytes put (several times --memory)"),
        flag("--memory", type=arg.size, default=128 << 20, help="the node's memory segment"),
        flags.DISK_BACKEND.but(
            default="auto", help="disk I/O: auto (io_uring, else threads), io_uring or threads"
        ),
        flags.JSON,
    )


def _run_tier_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import tier_bench

    cfg = tier_bench.TierBenchConfig(
        args.dir, args.value_size, args.batch_size, args.total, args.memory, args.disk_backend
    )
    r = {"pinned": tier_bench.run_pinned, "gpu": tier_bench.run_gpu, "disk": tier_bench.run}[args.tier](cfg)
    if args.json:
        print(json.dumps({**dataclasses.asdict(r), "demote_ratio": r.demote_ratio, "get_ratio": r.get_ratio}))
    else:
        put, base = {"disk": ("put (demotion)", "O_DIRECT"), "gpu": ("put", "cuMemcpy")}.get(
            r.tier, ("put", "memcpy")
        )
        print(
            f"{r.tier} tier ({r.backend}), {r.value_size / 2**20:.2f} MiB values, batches of {r.batch_size}, "
            f"{r.objects} objects read\n"
            f"  {put:14} {r.demote_gbps:6.2f} GB/s   {base} write {r.baseline_write_gbps:6.2f} GB/s"
            f"   ratio {r.demote_ratio:.2f}\n"
            f"  {'get':14} {r.get_gbps:6.2f} GB/s   {base} read  {r.baseline_read_gbps:6.2f} GB/s"
            f"   ratio {r.get_ratio:.2f}   batch p50 {r.get_p50_ms:.1f} ms  p99 {r.get_p99_ms:.1f} ms"
        )
        if r.misses:
            print(f"  MISSES: {r.misses} objects not read back")
    return 0 if r.misses == 0 else 1


def _add_allocator_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("allocator", help="offset allocator speed and fragmentation")
    add_flags(
        p,
        flag("--capacity", type=arg.size, default=4 << 30, help="bytes the allocator manages (default 4GiB)"),
        flag("--min-size", type=arg.size, default=4 << 10, help="smallest allocation (default 4KiB)"),
        flag("--max-size", type=arg.size, default=1 << 20, help="largest allocation (default 1MiB)"),
        flag("--ops", type=arg.positive_int, default=200_000, help="allocations and frees (default 200000)"),
        flags.JSON,
    )


def _run_allocator_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import allocator_bench

    if args.min_size > args.max_size or args.max_size > args.capacity:
        raise KVStoreError("need min-size <= max-size <= capacity")
    r = allocator_bench.run(args.capacity, args.min_size, args.max_size, args.ops)
    if args.json:
        print(json.dumps(dataclasses.asdict(r)))
    else:
        for name, value in dataclasses.asdict(r).items():
            print(f"{name:30} {value:,.3f}" if isinstance(value, float) else f"{name:30} {value:,}")
    return 0


def _run_default_bench(args: argparse.Namespace) -> int:
    """`kvstore bench`: the store and transfer benches on the embedded default, one summary table."""
    from kvstore.bench import report

    return report.summary(duration=args.duration)
