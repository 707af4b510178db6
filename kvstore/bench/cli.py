"""The `kvstore bench` command group: each bench's options and the call that runs it (`kvstore bench` alone:
the store and transfer summary)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from kvstore import cli_args as arg
from transfer_engine.errors import KVStoreError

Runner = Callable[[argparse.Namespace], int]


def add_bench_commands(commands: argparse._SubParsersAction) -> dict[str | None, Runner]:
    """Adds `kvstore bench` and its benches; returns each bench's runner by name (None: the summary)."""
    bench = commands.add_parser("bench", help="benchmarks (no subcommand: store + transfer summary)")
    bench.add_argument("--duration", type=arg.positive_float, default=3.0, help="seconds per measurement")
    benches = bench.add_subparsers(dest="bench")
    _add_transfer_bench(benches)
    _add_store_bench(benches)
    _add_master_bench(benches)
    _add_allocator_bench(benches)
    _add_connector_bench(benches)
    _add_tier_bench(benches)
    _add_trace_bench(benches)
    _add_routing_bench(benches)
    return {
        "transfer": _run_transfer_bench,
        "store": _run_store_bench,
        "master": _run_master_bench,
        "allocator": _run_allocator_bench,
        "connector": _run_connector_bench,
        "tier": _run_tier_bench,
        "trace": _run_trace_bench,
        "routing": _run_routing_bench,
        None: _run_default_bench,
    }


def _add_transfer_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transfer", help="transfer engine bandwidth and latency vs the machine baseline")
    p.add_argument(
        "--transport", type=arg.transport, help="auto or a transport; default: KVSTORE_TRANSPORT, else auto"
    )
    p.add_argument("--op", choices=["read", "write"], default="read")
    p.add_argument("--block-size", type=arg.size, default=1 << 20, help="bytes per request (e.g. 1MiB)")
    p.add_argument("--batch-size", type=arg.positive_int, default=16)
    p.add_argument("--threads", type=arg.positive_int, default=1)
    p.add_argument("--connections", type=arg.positive_int, help="TCP connections per peer (default 2)")
    p.add_argument("--duration", type=arg.positive_float, default=5.0, help="seconds measured")
    p.add_argument("--working-set", type=arg.size, default=512 << 20, help="bytes cycled on each side")
    p.add_argument("--mode", choices=["initiator", "target"], default="initiator")
    p.add_argument("--peer", type=arg.host_port, help="target segment HOST:PORT (default: start one here)")
    p.add_argument("--host", help="address this side listens on (default 127.0.0.1)")
    p.add_argument("--port", type=arg.port, default=0, help="target mode: port to listen on")
    p.add_argument("--no-baseline", action="store_true", help="skip the baseline measurement")
    p.add_argument(
        "--nics",
        help="NICs this side may use: names (eth0,eth1) or ^names to leave out (default: KVSTORE_NICS); "
        "with several, the JSON and the table give what each path moved",
    )
    p.add_argument(
        "--gpu",
        action="store_true",
        help="both sides in GPU 0 memory (same host: cuda_ipc), beside device-to-device cuMemcpyAsync",
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")


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
    return bench.main(cfg, args.mode, args.port, args.json)


def _add_store_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("store", help="store put/get/exists throughput and latency, cross-process")
    p.add_argument("--value-size", type=arg.size, default=512 << 10)
    p.add_argument("--batch-size", type=arg.positive_int, default=32)
    p.add_argument("--ops", default="put,get,exists", help="comma list of put, get, exists")
    p.add_argument("--duration", type=arg.positive_float, default=5.0, help="seconds per op")
    p.add_argument("--clients", type=arg.positive_int, default=1, help="client processes")
    p.add_argument(
        "--transport", type=arg.transport, help="auto or a transport; default: KVSTORE_TRANSPORT, else auto"
    )
    p.add_argument("--master", type=arg.host_port, help="a running master (default: start a cluster here)")
    p.add_argument("--segment-size", type=arg.size, default=2 << 30, help="storage node segment")
    p.add_argument(
        "--mode", choices=["orchestrator", "client"], default="orchestrator", help=argparse.SUPPRESS
    )
    p.add_argument("--json", action="store_true", help="one JSON object per op, one per line")
    p.add_argument(
        "--mooncake",
        metavar="PYTHON",
        help="also measure Mooncake's store (master, storage process, client; put and get over TCP) with "
        "this Python (an environment with mooncake-transfer-engine-non-cuda; kvstore.bench.mooncake_bench)",
    )
    p.add_argument(
        "--rounds",
        type=arg.positive_int,
        default=1,
        help="with --mooncake: alternate ours and theirs N times",
    )


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
                    (r for r in results if r.op == row["op"] and r.transport == row["transport"]), None
                )
                versus = f"  kvstore/Mooncake {ours.ops_per_s / row['ops_per_s']:.2f}x" if ours else ""
                print(
                    f"Mooncake {row['op']:4} {row['ops_per_s']:>12,.0f} ops/s {row['gbps']:7.2f} GB/s "
                    f"p50 {row['p50_us']:8.0f} us p99 {row['p99_us']:8.0f} us{versus}"
                )
    return 0 if ok else 1


def _add_routing_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "routing", help="replay a trace over simulated instances: round-robin, least-loaded, prefix-aware"
    )
    p.add_argument("trace", help="FAST'25-format JSONL (hash_ids = prefix-chained 512-token blocks)")
    p.add_argument("--instances", type=arg.positive_int, default=8)
    p.add_argument(
        "--gpu-blocks", type=arg.positive_int, default=600, help="blocks each instance's GPU cache holds"
    )
    p.add_argument("--limit", type=arg.positive_int, help="first N requests only")
    p.add_argument(
        "--speedup", type=arg.positive_float, default=1.0, help="divide the trace's inter-arrival times"
    )
    p.add_argument(
        "--prefill-tokens-per-s",
        type=arg.positive_float,
        default=10_000.0,
        help="an instance's prefill rate (uncached tokens a second)",
    )
    p.add_argument(
        "--block-bytes",
        type=arg.size,
        default=64 << 20,
        help="KV bytes of one 512-token block (default: Llama-3-8B in bf16)",
    )
    p.add_argument(
        "--store-gbps",
        type=arg.positive_float,
        help="store read bandwidth (default: measured here, with its in-run baseline)",
    )
    p.add_argument("--no-store", action="store_true", help="instances have only their GPU caches")
    p.add_argument("--json", action="store_true", help="one JSON object per policy, one per line")
    p.add_argument("--plot", help="save hit rates and TTFT per policy as a PNG here")


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
    p.add_argument("--objects", type=arg.positive_int, default=200_000, help="objects each client puts")
    p.add_argument("--batch-size", type=arg.positive_int, default=1000, help="keys per request")
    p.add_argument("--value-size", type=arg.size, default=1024, help="the size each put declares")
    p.add_argument("--clients", type=arg.positive_int, default=1, help="load processes, run at once")
    p.add_argument("--ops", default="put,get,exists", help="comma list of put, get, exists (put first)")
    p.add_argument(
        "--pipeline",
        type=arg.positive_int,
        default=1,
        help="requests each load process keeps in flight (threads, a connection each; default 1)",
    )
    p.add_argument(
        "--mooncake",
        metavar="PYTHON",
        help="also measure Mooncake's master in the same shape, with this Python (of a virtual environment "
        "with mooncake-transfer-engine-non-cuda; kvstore.bench.mooncake_bench says how to make one)",
    )
    p.add_argument("--master", type=arg.host_port, help=argparse.SUPPRESS)  # the load processes' master
    p.add_argument(
        "--mode", choices=["orchestrator", "client"], default="orchestrator", help=argparse.SUPPRESS
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")


def _run_master_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import master_bench

    cfg = master_bench.MasterBenchConfig(
        objects=args.objects,
        batch_size=args.batch_size,
        value_size=args.value_size,
        clients=args.clients,
        ops=tuple(o.strip() for o in args.ops.split(",") if o.strip()),
        pipeline=args.pipeline,
    )
    cfg.validate()
    if args.mode == "client":
        if not args.master:
            raise KVStoreError("client mode needs --master")
        return master_bench.client_main(cfg, args.master)
    from kvstore.bench import report

    rates, memory = report.with_progress(lambda advance: master_bench.run(cfg, advance), len(cfg.ops) + 2)
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
    p.add_argument("--case", choices=CASES, default="dense", help="what to move (default dense)")
    p.add_argument(
        "--engine",
        choices=["vllm", "sglang"],
        default="vllm",
        help="dense: whose connector (the others: vllm)",
    )
    p.add_argument(
        "--model",
        choices=sorted({*MODELS, *HYBRID_MODELS}),
        help="KV geometry (default llama3-8b; hybrid: gemma3-4b, or another hybrid model)",
    )
    p.add_argument("--blocks", type=arg.positive_int, default=32, help="blocks (pages) per request")
    p.add_argument("--requests", type=arg.positive_int, default=20, help="requests saved and loaded")
    p.add_argument(
        "--window",
        type=arg.positive_int,
        default=128,
        help="hybrid: sliding window in tokens (default 128: a quarter of a 32-block request, as Gemma 3's "
        "1024 is of a 4096-token prompt)",
    )
    p.add_argument("--write-tp", type=arg.positive_int, default=2, help="tp-mismatch: TP ranks that save (2)")
    p.add_argument("--read-tp", type=arg.positive_int, default=4, help="tp-mismatch: TP ranks that load (4)")
    p.add_argument("--master", type=arg.host_port, help="a running master (default: start a cluster here)")
    p.add_argument("--segment-size", type=arg.size, default=2 << 30, help="storage node segment")
    p.add_argument("--json", action="store_true", help="one JSON object")


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
    p.add_argument("--tier", choices=["disk", "pinned", "gpu"], default="disk", help="disk, pinned or gpu")
    p.add_argument("--gpu", dest="tier", action="store_const", const="gpu", help="the same as --tier gpu")
    p.add_argument("--dir", default=".", help="where the disk file goes (its file system is measured)")
    p.add_argument("--value-size", type=arg.size, default=1 << 20)
    p.add_argument("--batch-size", type=arg.positive_int, default=32)
    p.add_argument("--total", type=arg.size, default=512 << 20, help="bytes put (several times --memory)")
    p.add_argument("--memory", type=arg.size, default=128 << 20, help="the node's memory segment")
    p.add_argument("--disk-backend", choices=["auto", "io_uring", "threads"], default="auto")
    p.add_argument("--json", action="store_true")


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
    p.add_argument("--capacity", type=arg.size, default=4 << 30)
    p.add_argument("--min-size", type=arg.size, default=4 << 10)
    p.add_argument("--max-size", type=arg.size, default=1 << 20)
    p.add_argument("--ops", type=arg.positive_int, default=200_000)
    p.add_argument("--json", action="store_true")


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


def _add_trace_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="replay a request trace: block hit rate per policy and mode")
    p.add_argument("trace", help="FAST'25-format JSONL (hash_ids = prefix-chained blocks)")
    p.add_argument("--nodes", type=arg.positive_int, default=1)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--capacity-tokens", type=arg.positive_int, help="per node")
    size.add_argument("--capacity-blocks", type=arg.positive_int, help="per node (default 10000)")
    p.add_argument("--block-tokens", type=arg.positive_int, default=512)
    p.add_argument("--policy", default="adaptive", help="eviction policy, or a comma list (with --plot)")
    p.add_argument("--mode", choices=["global", "local"], default="global")
    p.add_argument("--route", choices=["longest", "balanced"], default="longest", help="local mode routing")
    p.add_argument("--payload-bytes", type=arg.size, default=1024, help="object size without --simulate")
    p.add_argument("--simulate", action="store_true", help="run the policy without moving data (fast)")
    p.add_argument("--plot", metavar="PNG", help="plot hit rate vs capacity for the policies (simulated)")
    p.add_argument("--limit", type=arg.positive_int, help="replay only the first N requests")
    p.add_argument(
        "--replication",
        action="store_true",
        help="global + simulated: hot-block replication on trace time (Figure 11 data)",
    )
    p.add_argument(
        "--hot-rate",
        type=arg.positive_float,
        default=0.005,
        help="reads/s (trace time) that make a block hot",
    )
    p.add_argument("--heat-half-life", type=arg.positive_float, default=600.0, help="seconds of trace time")
    p.add_argument("--max-replicas", type=arg.positive_int, default=3)
    p.add_argument(
        "--disk-capacity-blocks",
        type=arg.positive_int,
        help="per node: a disk tier under the memory one (--capacity-*); hits split into memory and disk",
    )
    p.add_argument(
        "--promote-window",
        type=arg.non_negative_float,
        default=600.0,
        help="with a disk tier: a disk block read twice within this many trace seconds moves to memory",
    )
    p.add_argument(
        "--bounds",
        action="store_true",
        help="what any online policy could reach at this capacity (offline optimum, oracles, fitted ranking)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per result")


def _run_trace_bench(args: argparse.Namespace) -> int:
    from kvstore.bench import trace as tr
    from kvstore.master.eviction import make_policy

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for name in policies:
        make_policy(name)  # unknown names fail here, clearly
    capacity = args.capacity_blocks or (
        args.capacity_tokens // args.block_tokens if args.capacity_tokens else 10000
    )
    if capacity <= 0:
        raise KVStoreError("capacity is smaller than one block")
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
        sweep = sorted({max(1, int(capacity * f)) for f in (0.1, 0.3, 1, 3, 10)})
        results = tr.plot(requests, sweep, policies, args.mode, args.nodes, args.plot, name, args.route)
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
        print(f"plot written to {args.plot}")
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


def _run_default_bench(args: argparse.Namespace) -> int:
    """`kvstore bench`: the store and transfer benches on the embedded default, one summary table."""
    from kvstore.bench import report

    return report.summary(duration=args.duration)
