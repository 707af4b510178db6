"""`kvstore bench transfer`: engine bandwidth and latency, printed beside the machine's own baseline.

With no peer given, a target process is started on this host (the embedded default); the initiator
runs here. The baseline is measured in the same invocation: a memcpy over a working set as large as
the bench's own for shm/local, a raw TCP stream with the same number of connections for tcp, a raw UCP
loop of the same operations (same UCX, same sizes and batches) for ucx.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from transfer_engine import _tools
from transfer_engine.engine import Op, PathInfo, Peer, Region, RequestState, TransferEngine
from transfer_engine.errors import InvalidArgumentError, NotSupportedError
from transfer_engine.procs import READY_PREFIX, module_process, wait_for_stop_request
from transfer_engine.units import format_size


@dataclass
class TransferBenchConfig:
    transport: str | None = None
    """None: the engine's setting (KVSTORE_TRANSPORT, else auto)."""
    op: str = "read"
    block_size: int = 1 << 20
    batch_size: int = 16
    threads: int = 1
    connections: int | None = None
    """TCP connections per peer; None: the engine's setting (KVSTORE_TCP_CONNECTIONS, else 2)."""
    duration: float = 5.0
    working_set: int = 512 << 20
    """Bytes cycled through on each side; larger than the CPU cache so nothing is cache-resident."""
    peer: str | None = None
    host: str | None = None
    """Address this side serves on; None: the engine's setting (KVSTORE_HOST, else 127.0.0.1)."""
    baseline: bool = True
    warmup: float = 0.5
    gpu: bool = False
    """Both sides' memory on GPU 0 (a same-host peer's GPU is reached by cuda_ipc); the baseline is then
    batched device-to-device cuMemcpyAsync of the same shape."""
    nics: str | None = None
    """The NICs this side may use (KVSTORE_NICS syntax); None: the engine's setting."""

    def validate(self) -> None:
        if self.op not in ("read", "write"):
            raise InvalidArgumentError("--op must be read or write")
        if self.block_size <= 0 or self.batch_size <= 0 or self.threads <= 0 or (self.connections or 1) <= 0:
            raise InvalidArgumentError("block size, batch size, threads and connections must be positive")
        if self.duration <= 0:
            raise InvalidArgumentError("--duration must be positive")
        if self.threads > 64 or (self.connections or 1) > 64 or self.batch_size > 65536:
            raise InvalidArgumentError("threads/connections up to 64, batch size up to 65536")
        if self.block_size > self.working_set:
            raise InvalidArgumentError("--block-size is larger than the working set")

    def engine_settings(self) -> dict[str, Any]:
        """What this bench sets on its engine in code (everything else: environment, then defaults)."""
        given = {
            "host": self.host,
            "transport": self.transport,
            "tcp_connections": self.connections,
            "nics": self.nics,
        }
        return {k: v for k, v in given.items() if v is not None}


@dataclass
class TransferBenchResult:
    transport: str
    op: str
    block_size: int
    batch_size: int
    threads: int
    connections: int
    duration_s: float
    bytes: int
    gbps: float
    ops_per_s: float
    p50_us: float
    p99_us: float
    baseline_gbps: float | None
    baseline_kind: str | None
    ratio: float | None
    failed_requests: int
    peer: str
    paths: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Per path of the link (local NIC -> peer NIC): what it moved while measured (bytes, gbps, share)
    and its failures and failovers; one entry for a single path."""


def path_shares(before: list[PathInfo], after: list[PathInfo], seconds: float) -> list[dict[str, Any]]:
    """What each path moved between two snapshots of TransferEngine.paths."""
    start = {(p.transport, p.local_nic, p.remote_address): p for p in before}
    rows: list[dict[str, Any]] = []
    for p in after:
        first = start.get((p.transport, p.local_nic, p.remote_address))
        moved = p.bytes - (first.bytes if first else 0)
        rows.append(
            {
                "transport": p.transport,
                "local_nic": p.local_nic,
                "remote_nic": p.remote_nic,
                "remote_address": p.remote_address,
                "bytes": moved,
                "gbps": moved / seconds / 1e9,
                "up": p.up,
                "failures": p.failures,
                "failovers": p.failovers,
            }
        )
    total = sum(r["bytes"] for r in rows)
    for r in rows:
        r["share"] = r["bytes"] / total if total else 0.0
    return rows


# -- target ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def _memory(engine: TransferEngine, size: int, gpu: bool, export: bool) -> Iterator[Region]:
    """`size` bytes registered with the engine: pre-faulted host memory, or device memory of GPU 0."""
    if not gpu:
        yield engine.allocate(size, export=export)
        return
    from transfer_engine import cuda

    with cuda.DeviceMemory(size) as memory:
        region = engine.register_ptr(memory.ptr, size, kind="gpu:0", export=export)
        try:
            yield region
        finally:
            engine.unregister(region)


def run_target(port: int, working_set: int, gpu: bool = False, **settings: Any) -> None:
    """Serves one region until SIGTERM/SIGINT (or stdin EOF when its parent asked for that)."""
    with TransferEngine(port=port, **settings) as engine, _memory(engine, working_set, gpu, True) as region:
        print(f"{READY_PREFIX}{engine.name} region={region.id}", flush=True)
        wait_for_stop_request()


@contextlib.contextmanager
def in_process_target(host: str, working_set: int, gpu: bool) -> Iterator[str]:
    """A target engine in this process: the only kind the local transport can reach."""
    with TransferEngine(host=host) as engine, _memory(engine, working_set, gpu, True):
        yield engine.name


@contextlib.contextmanager
def spawned_target(host: str, working_set: int, gpu: bool, transport: str = "auto") -> Iterator[str]:
    """Starts a bench target (`python -m transfer_engine.bench`) as a child; yields its engine name. It
    runs the initiator's transport (ucx, for one, is started only where it is asked for)."""
    args = ["--host", host, "--working-set", str(working_set), "--transport", transport]
    args += ["--gpu"] if gpu else []
    with module_process("transfer_engine.bench", args) as (_, ready):
        yield ready.split()[0]


# -- initiator ------------------------------------------------------------------------------------
class _Worker(threading.Thread):
    """Submits batches back to back over its own slice of the working set, recording latencies."""

    def __init__(
        self,
        engine: TransferEngine,
        peer: Peer,
        cfg: TransferBenchConfig,
        index: int,
        local_base: int,
        remote_region: int,
        span: int,
        stop_at: list[float],
    ) -> None:
        super().__init__(daemon=True)
        self.engine, self.peer, self.cfg = engine, peer, cfg
        self.stop_at = stop_at
        blocks = max(cfg.batch_size, span // cfg.block_size)
        per = cfg.batch_size
        # Precomputed batches cycling through this worker's span (local and remote at the same offsets).
        first = index * span
        self.batches = []
        for start in range(0, blocks - per + 1, per):
            offsets = (first + (np.arange(start, start + per, dtype=np.uint64) * cfg.block_size)).astype(
                np.uint64
            )
            self.batches.append((local_base + offsets, offsets))
        self.remote_region = remote_region
        self.op = Op.READ if cfg.op == "read" else Op.WRITE
        self.latencies: list[float] = []
        self.requests = 0
        self.failed = 0
        self.measuring = False

    def run(self) -> None:
        i = 0
        while time.perf_counter() < self.stop_at[0]:
            local, remote = self.batches[i % len(self.batches)]
            i += 1
            t0 = time.perf_counter()
            handle = self.engine.submit(
                self.op, local, self.peer, self.remote_region, remote, self.cfg.block_size
            )
            handle.wait()
            elapsed = time.perf_counter() - t0
            if self.measuring:
                states = handle.states()
                ok = int(np.count_nonzero(states == RequestState.COMPLETED))
                self.requests += ok
                self.failed += len(states) - ok
                self.latencies.append(elapsed)


def run_initiator(cfg: TransferBenchConfig, console: Console | None = None) -> TransferBenchResult:
    cfg.validate()
    if cfg.gpu:
        from transfer_engine import cuda

        cuda.require()  # says why not before a target is started
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(TransferEngine(**cfg.engine_settings()))
        host = engine.config.host
        if cfg.peer:
            address = cfg.peer
        elif engine.config.transport == "local":
            address = stack.enter_context(in_process_target(host, cfg.working_set, cfg.gpu))
        else:
            address = stack.enter_context(
                spawned_target(host, cfg.working_set, cfg.gpu, engine.config.transport)
            )
        peer = engine.open_peer(address)
        remote = max(peer.regions, key=lambda r: r.length)
        working_set = min(cfg.working_set, remote.length)
        span = working_set // cfg.threads
        if span < cfg.block_size * cfg.batch_size:
            raise InvalidArgumentError("working set too small for threads x batch size x block size")
        local = stack.enter_context(_memory(engine, working_set, cfg.gpu, False))
        transport = _carrier(peer, local.kind, remote.kind)
        stop_at = [time.perf_counter() + cfg.warmup + cfg.duration]
        workers = [
            _Worker(engine, peer, cfg, i, local.addr, remote.id, span, stop_at) for i in range(cfg.threads)
        ]
        for w in workers:
            w.start()
        measured_from: list[PathInfo] = []
        _progress(cfg, workers, console, on_measuring=lambda: measured_from.extend(engine.paths(peer)))
        for w in workers:
            w.join()
        paths = path_shares(measured_from, engine.paths(peer), cfg.duration)
        elapsed = cfg.duration
        requests = sum(w.requests for w in workers)
        lat = np.array([x for w in workers for x in w.latencies]) * 1e6
        nbytes = requests * cfg.block_size
        gbps = nbytes / elapsed / 1e9
        copy_parallelism = engine.copy_parallelism
    tcp = engine.config.transport_settings("tcp")
    connections = int(tcp["connections"])
    baseline_gbps, kind = (None, None)
    if cfg.baseline:
        baseline_gbps, kind = measure_baseline(
            cfg,
            transport,
            working_set,
            copy_parallelism,
            connections,
            host,
            tcp["socket_buffer"],
            engine.config.ucx_library,
        )
    return TransferBenchResult(
        transport=transport,
        op=cfg.op,
        block_size=cfg.block_size,
        batch_size=cfg.batch_size,
        threads=cfg.threads,
        connections=connections,
        duration_s=elapsed,
        bytes=nbytes,
        gbps=gbps,
        ops_per_s=requests / elapsed,
        p50_us=float(np.percentile(lat, 50)) if lat.size else 0.0,
        p99_us=float(np.percentile(lat, 99)) if lat.size else 0.0,
        baseline_gbps=baseline_gbps,
        baseline_kind=kind,
        ratio=(gbps / baseline_gbps) if baseline_gbps else None,
        failed_requests=sum(w.failed for w in workers),
        peer=address,
        paths=paths,
    )


def _progress(
    cfg: TransferBenchConfig,
    workers: list[_Worker],
    console: Console | None,
    on_measuring: Callable[[], None] = lambda: None,
) -> None:
    """Shows a progress bar during warm-up and measurement; flips workers into measuring mode (and calls
    `on_measuring` then)."""
    total = cfg.warmup + cfg.duration
    start = time.perf_counter()
    columns = [TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console or Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"transfer {cfg.op} {format_size(cfg.block_size)}", total=total)
        measuring = False
        while any(w.is_alive() for w in workers):
            now = time.perf_counter() - start
            if not measuring and now >= cfg.warmup:
                on_measuring()
                for w in workers:
                    w.measuring = True
                measuring = True
            progress.update(task, completed=min(now, total))
            time.sleep(0.05)


_UCX_TARGET = """
import sys
from transfer_engine import _tools, ucx
ucx.preload(sys.argv[2])
_tools.ucx_rma_serve(int(sys.argv[1]), 1, 0)
"""


def ucx_rma_across_processes(
    cfg: TransferBenchConfig, working_set: int, seconds: float, ucx_library: str
) -> dict[str, Any]:
    """The raw UCP loop against a target in a process of its own, as an engine's peer is (UCX's
    same-host copies cost more across processes than within one)."""
    target = subprocess.Popen(
        [sys.executable, "-c", _UCX_TARGET, str(working_set), ucx_library],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert target.stdin is not None and target.stdout is not None and target.stderr is not None
    try:
        header = target.stdout.read(4)
        blob = target.stdout.read(int.from_bytes(header, "little")) if len(header) == 4 else b""
        if not blob:
            target.kill()
            raise NotSupportedError(
                f"the ucx baseline's target did not start: {target.stderr.read().decode()[-2000:]}"
            )
        return dict(
            _tools.ucx_rma_baseline(
                cfg.op == "write", cfg.block_size, cfg.batch_size, working_set, seconds, target=blob
            )
        )
    finally:
        target.stdin.close()  # (its end of file: the target stops serving)
        try:
            target.wait(timeout=30)
        except subprocess.TimeoutExpired:
            target.kill()
            target.wait()


def measure_baseline(
    cfg: TransferBenchConfig,
    transport: str,
    working_set: int,
    copy_parallelism: int,
    connections: int,
    host: str,
    socket_buffer: int,
    ucx_library: str = "",
) -> tuple[float, str]:
    """The machine's own ceiling for what `transport` does: a raw socket stream for a network transport,
    memcpy for the memory-to-memory ones."""
    seconds = min(cfg.duration, 3.0)
    if cfg.gpu:
        gbps = device_copy_gbps(cfg.block_size, cfg.batch_size, working_set, seconds)
        return gbps, f"cuMemcpyAsync device->device, batches of {cfg.batch_size}"
    if transport == "tcp":
        gbps = tcp_stream_gbps(host, connections, cfg.block_size, working_set, seconds, socket_buffer)
        return gbps, f"raw tcp stream x{connections} over {format_size(working_set)}"
    if transport == "ucx":
        call = "ucp_put_nbx + flush" if cfg.op == "write" else "ucp_get_nbx"
        r = ucx_rma_across_processes(cfg, working_set, seconds, ucx_library)
        over = format_size(working_set)
        return float(
            r["gbps"]
        ), f"raw UCP {call} loop to another process, batches of {cfg.batch_size}, over {over}"
    # The engine copies on its worker threads and the waiting thread: give memcpy the same parallelism.
    threads = max(cfg.threads, copy_parallelism)
    gbps = memcpy_gbps(cfg.block_size, working_set, seconds, threads)
    return gbps, f"memcpy x{threads} over {format_size(working_set)}"


def device_copy_gbps(block_size: int, batch_size: int, working_set: int, seconds: float) -> float:
    """GPU 0's device-to-device bandwidth: batches of `batch_size` copies of `block_size` bytes between two
    device buffers of `working_set` bytes, each batch on one stream with one wait."""
    from transfer_engine import cuda

    with cuda.DeviceMemory(working_set) as a, cuda.DeviceMemory(working_set) as b:
        blocks = working_set // block_size
        moved, start, i = 0, time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            at = (np.arange(i, i + batch_size) % blocks) * block_size
            i += batch_size
            cuda.copy_between(0, (b.ptr + at).tolist(), (a.ptr + at).tolist(), [block_size] * batch_size)
            moved += batch_size * block_size
        return moved / (time.perf_counter() - start) / 1e9


def _carrier(peer: Peer, local_kind: str, remote_kind: str) -> str:
    """The peer transport that moves local_kind <-> remote_kind memory (the engine's choice per request)."""
    from transfer_engine.config import transport_specs

    specs = {spec.name: spec for spec in transport_specs()}
    for name in peer.transports:
        spec = specs[name]
        if local_kind.split(":")[0] in spec.local_kinds and remote_kind.split(":")[0] in spec.remote_kinds:
            return name
    raise InvalidArgumentError(
        f"{'/'.join(peer.transports)} cannot move {local_kind} <-> {remote_kind} memory"
    )


def memcpy_gbps(block_size: int, working_set: int, seconds: float, threads: int = 1) -> float:
    """This machine's memcpy bandwidth for `block_size` copies cycling over `working_set` bytes."""
    return float(_tools.memcpy_baseline(block_size, working_set, seconds, threads)["gbps"])


def tcp_stream_gbps(
    host: str, connections: int, block_size: int, working_set: int, seconds: float, socket_buffer: int
) -> float:
    """A raw TCP stream's bandwidth to `host` (a server of its own there) over `connections` sockets."""
    r = _tools.tcp_stream_baseline(host, connections, block_size, working_set, seconds, socket_buffer)
    return float(r["gbps"])


def render(result: TransferBenchResult, console: Console) -> None:
    table = Table(title=f"kvstore bench transfer (peer {result.peer})", show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("transport / op", f"{result.transport} / {result.op}"),
        ("block x batch", f"{format_size(result.block_size)} x {result.batch_size}"),
        ("threads / connections", f"{result.threads} / {result.connections}"),
        ("bandwidth", f"{result.gbps:.2f} GB/s"),
        ("requests", f"{result.ops_per_s:,.0f} /s"),
        ("batch latency p50 / p99", f"{result.p50_us:.1f} / {result.p99_us:.1f} µs"),
    ]
    if result.baseline_gbps is not None:
        rows.append((f"baseline ({result.baseline_kind})", f"{result.baseline_gbps:.2f} GB/s"))
        rows.append(("ratio to baseline", f"{result.ratio:.2f}"))
    if len(result.paths) > 1:
        for path in result.paths:
            name = f"path {path['local_nic'] or '(kernel route)'} -> {path['remote_address']}"
            state = "" if path["up"] else ", down"
            value = f"{path['gbps']:.2f} GB/s ({path['share']:.0%}{state})"
            if path["failures"] or path["failovers"]:
                value += f", {path['failures']} failures, {path['failovers']} failovers"
            rows.append((name, value))
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    if result.failed_requests:
        console.print(f"[red]{result.failed_requests} requests failed[/red]")


def to_json(result: TransferBenchResult) -> str:
    return json.dumps(dataclasses.asdict(result))


def main(cfg: TransferBenchConfig, mode: str, port: int, as_json: bool) -> int:
    if mode == "target":
        run_target(port, cfg.working_set, cfg.gpu, **cfg.engine_settings())
        return 0
    result = run_initiator(cfg)
    if as_json:
        print(to_json(result))
    else:
        render(result, Console())
    return 0 if result.failed_requests == 0 else 1


if __name__ == "__main__":  # the target side, as spawned_target starts it
    import argparse

    parser = argparse.ArgumentParser(description="transfer bench target")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--working-set", type=int, required=True)
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--transport", default="auto")
    options = parser.parse_args()
    run_target(options.port, options.working_set, options.gpu, host=options.host, transport=options.transport)
