"""`kvstore bench store`: put / get / exists throughput and latency of the store, cross-process.

By default it builds the cluster a deployment has: the master and one storage node, each its own
process, and the client in a separate process that runs the ops and reports JSON lines. (Until issue 42
the master ran in a thread of this process, beside the progress bar and the clients' readers: it waited
for their turns at the interpreter lock, which Mooncake's master, its own process, never does; an
uncached single get's p99 was several times higher so.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from kvstore import Store
from kvstore.bench import load_procs
from kvstore.errors import InvalidArgumentError, KVStoreError
from kvstore.procs import kvstore_process
from transfer_engine.bench import memcpy_gbps, tcp_stream_gbps
from transfer_engine.config import transport_choices
from transfer_engine.units import format_size

OPS = ("put", "get", "exists")


@dataclass
class StoreBenchConfig:
    value_size: int = 512 << 10
    batch_size: int = 32
    ops: tuple[str, ...] = OPS
    duration: float = 5.0
    clients: int = 1
    transport: str | None = None
    """None: the clients' engine setting (KVSTORE_TRANSPORT, else auto)."""
    master: str | None = None
    segment_size: int = 2 << 30
    exists_batch: int = 128
    single_gets: bool = True

    def validate(self) -> None:
        if not set(self.ops) <= set(OPS) or not self.ops:
            raise InvalidArgumentError(f"--ops takes a comma list of {', '.join(OPS)}")
        if self.value_size <= 0 or self.batch_size <= 0 or self.duration <= 0 or self.clients <= 0:
            raise InvalidArgumentError("value size, batch size, duration and clients must be positive")
        if self.transport is not None and self.transport not in transport_choices():
            raise InvalidArgumentError(f"--transport is one of {', '.join(transport_choices())}")
        if self.value_size * self.batch_size * 4 > self.segment_size:
            raise InvalidArgumentError("the segment must hold at least four batches")


@dataclass
class OpResult:
    op: str
    value_size: int
    batch_size: int
    ops_per_s: float
    gbps: float
    p50_us: float
    p99_us: float
    errors: int
    transport: str
    clients: int = 1
    # The machine's own ceiling for the same bytes, measured in the same run by the client (memcpy for a
    # same-host node, a raw TCP stream over loopback for tcp); None for exists, or a node out of reach.
    baseline_gbps: float | None = None
    baseline_kind: str | None = None
    ratio: float | None = None


def _measure(duration: float, step: Callable[[int], tuple[int, int]]) -> tuple[float, int, int, np.ndarray]:
    """Runs step(i) -> (items, errors) back to back for `duration`.

    Returns (seconds, items, errors, latencies in µs).
    """
    lat: list[float] = []
    items = errors = 0
    start = time.perf_counter()
    i = 0
    while time.perf_counter() - start < duration:
        t0 = time.perf_counter()
        n, bad = step(i)
        lat.append(time.perf_counter() - t0)
        items += n
        errors += bad
        i += 1
    return time.perf_counter() - start, items, errors, np.array(lat) * 1e6


def _result(
    cfg: StoreBenchConfig,
    op: str,
    batch: int,
    measured: tuple[float, int, int, np.ndarray],
    bytes_per_item: int,
    transport: str,
    baseline: tuple[float, str] | None = None,
) -> OpResult:
    seconds, items, errors, lat = measured
    done = items - errors  # only successful, verified items count (a get's bytes passed the checksum)
    gbps = done * bytes_per_item / seconds / 1e9
    return OpResult(
        op,
        cfg.value_size,
        batch,
        done / seconds,
        gbps,
        float(np.percentile(lat, 50)),
        float(np.percentile(lat, 99)),
        errors,
        transport,
        baseline_gbps=baseline[0] if baseline else None,
        baseline_kind=baseline[1] if baseline else None,
        ratio=gbps / baseline[0] if baseline and baseline[0] else None,
    )


def _baseline(store: Store, block_size: int, working_set: int, seconds: float) -> tuple[float, str] | None:
    """The ceiling of what carries the client's bytes to its storage node, on this machine: memcpy when
    the node is on this host (shm, local), a raw TCP stream over loopback when tcp reaches it there."""
    peers = store.session.opened_peers()
    carrier = peers[0].transports[0] if peers and peers[0].transports else ""
    config = store.engine.config
    if carrier in ("shm", "local"):
        threads = store.engine.copy_parallelism
        gbps = memcpy_gbps(block_size, working_set, seconds, threads)
        return gbps, f"memcpy x{threads} over {format_size(working_set)}"
    if carrier == "tcp" and peers[0].name.startswith("127."):
        tcp = config.transport_settings("tcp")
        connections = int(tcp["connections"])
        gbps = tcp_stream_gbps(
            "127.0.0.1", connections, block_size, working_set, seconds, int(tcp["socket_buffer"])
        )
        return gbps, f"raw tcp stream x{connections} over loopback, {format_size(working_set)}"
    return None


def run_client(cfg: StoreBenchConfig, master: str) -> Iterator[OpResult]:
    """The client side: runs each op against the cluster and yields its figures."""
    settings = {"transport": cfg.transport} if cfg.transport else {}
    with Store.connect(master, buffer_size="16MiB", **settings) as store:
        n, size = cfg.batch_size, cfg.value_size
        transport = store.engine.config.transport
        source = np.random.default_rng(7).integers(0, 256, (n, size), dtype=np.uint8)
        dest = np.zeros((n, size), dtype=np.uint8)
        store.register_buffer(source)
        store.register_buffer(dest)
        sources, dests = list(source), list(dest)
        # A resident working set for gets and exists: a quarter of the segment, written once.
        resident = max(n, min(cfg.segment_size // 4 // size, 4096) // n * n)
        keys = [f"bench/{store.client_id}/{i}" for i in range(resident)]
        for start in range(0, resident, n):
            store.batch_put_from(keys[start : start + n], sources)
        batches = [keys[s : s + n] for s in range(0, resident, n)]
        baseline = _baseline(store, size, resident * size, min(cfg.duration, 2.0))
        if "put" in cfg.ops:
            rounds = [0]

            def put(i: int) -> tuple[int, int]:
                rounds[0] = i + 1
                batch = [f"bench/{store.client_id}/put/{i}/{j}" for j in range(n)]
                results = store.batch_put_from(batch, sources)
                return n, sum(1 for r in results if r != 0)

            yield _result(cfg, "put", n, _measure(cfg.duration, put), size, transport, baseline)
            # Clean up only what this client wrote (other clients' resident sets stay), then restore
            # whatever of its resident set the puts evicted.
            written = [f"bench/{store.client_id}/put/{i}/{j}" for i in range(rounds[0]) for j in range(n)]
            for start in range(0, len(written), 4096):
                store.batch_remove(written[start : start + 4096], force=True)
            for start in range(0, resident, n):
                store.batch_put_from(keys[start : start + n], sources)
        if "get" in cfg.ops:

            def get(i: int) -> tuple[int, int]:
                results = store.batch_get_into(batches[i % len(batches)], dests)
                return n, sum(1 for r in results if r != size)

            yield _result(cfg, "get", n, _measure(cfg.duration, get), size, transport, baseline)
            if cfg.single_gets:

                def get_one(i: int) -> tuple[int, int]:
                    return 1, int(store.get_into(keys[i % resident], dests[0]) != size)

                yield _result(
                    cfg, "get_single", 1, _measure(min(cfg.duration, 3.0), get_one), size, transport, baseline
                )

            # The same reads when every key's location must be asked of the master (no valid lease).
            def get_cold(i: int) -> tuple[int, int]:
                store.leases.clear()
                results = store.batch_get_into(batches[i % len(batches)], dests)
                return n, sum(1 for r in results if r != size)

            yield _result(
                cfg, "get_uncached", n, _measure(min(cfg.duration, 3.0), get_cold), size, transport, baseline
            )
            if cfg.single_gets:

                def get_one_cold(i: int) -> tuple[int, int]:
                    store.leases.clear()
                    return 1, int(store.get_into(keys[i % resident], dests[0]) != size)

                cold = _measure(min(cfg.duration, 3.0), get_one_cold)
                yield _result(cfg, "get_single_uncached", 1, cold, size, transport, baseline)
        if "exists" in cfg.ops:
            m = cfg.exists_batch
            probe = [keys[j % resident] for j in range(m)]

            def exists(i: int) -> tuple[int, int]:
                return m, sum(1 for x in store.batch_exists(probe) if not x)

            yield _result(cfg, "exists", m, _measure(cfg.duration, exists), 0, transport)


@contextlib.contextmanager
def process_cluster(segment_size: int) -> Iterator[tuple[str, int]]:
    """A master process and one storage node process, as deployed; yields (master address, master pid).
    For a bench whose client runs in this process: a master thread here would share its interpreter lock
    (a transfer's return waited up to the 5 ms switch interval behind the master's work)."""
    with kvstore_process(["master", "--port", "0"]) as (master, ready):
        address = ready.split()[0]
        with kvstore_process(["node", "--master", address, "--segment-size", str(segment_size)]):
            yield address, master.pid


def run(cfg: StoreBenchConfig, progress: Callable[[str], None] | None = None) -> list[OpResult]:
    """Orchestrates: cluster (unless --master), then `clients` client processes; gathers their results."""
    cfg.validate()
    with contextlib.ExitStack() as stack:
        master = cfg.master or stack.enter_context(process_cluster(cfg.segment_size))[0]
        args = [
            "bench",
            "store",
            "--mode",
            "client",
            "--master",
            master,
            "--json",
            "--value-size",
            str(cfg.value_size),
            "--batch-size",
            str(cfg.batch_size),
            "--ops",
            ",".join(cfg.ops),
            "--duration",
            str(cfg.duration),
            "--segment-size",
            str(cfg.segment_size),
            *(["--transport", cfg.transport] if cfg.transport else []),
        ]
        per_client = load_procs.gather(args, cfg.clients, OpResult, progress)
    return _combine(per_client)


def run_mooncake(cfg: StoreBenchConfig, python: str) -> list[dict]:
    """Mooncake's store in the same shape, put and get over TCP (kvstore.bench.mooncake_bench --data, a
    standalone script run with `python`, the interpreter of an environment with
    mooncake-transfer-engine-non-cuda): its master, a storage process and one client."""
    from kvstore.bench.mooncake_side import run_mooncake_side

    args = ["--data", "--segment", str(cfg.segment_size), "--duration", str(cfg.duration)]
    args += ["--batch-size", str(cfg.batch_size), "--value-size", str(cfg.value_size)]
    rows = run_mooncake_side(python, args)
    if not {"put", "get"} <= {r.get("op") for r in rows}:
        raise KVStoreError(f"Mooncake's side printed no put and get: {rows}")
    return rows


def _combine(per_client: list[list[OpResult]]) -> list[OpResult]:
    """Several clients: throughput adds up, latency is the worst client's."""
    if not per_client or not per_client[0]:
        raise KVStoreError("bench clients reported nothing")
    combined = []
    for rows in zip(*per_client, strict=True):
        first = rows[0]
        gbps = sum(r.gbps for r in rows)
        # (each client measured the ceiling before its ops, maybe beside others: the highest is the truest)
        ceiling = max(rows, key=lambda r: r.baseline_gbps or 0.0)
        combined.append(
            OpResult(
                first.op,
                first.value_size,
                first.batch_size,
                sum(r.ops_per_s for r in rows),
                gbps,
                max(r.p50_us for r in rows),
                max(r.p99_us for r in rows),
                sum(r.errors for r in rows),
                first.transport,
                len(rows),
                ceiling.baseline_gbps,
                ceiling.baseline_kind,
                gbps / ceiling.baseline_gbps if ceiling.baseline_gbps else None,
            )
        )
    return combined


def client_main(cfg: StoreBenchConfig, master: str) -> int:
    """`--mode client`: one JSON line per op (kvstore.bench.load_procs)."""
    return load_procs.report(run_client(cfg, master))


def describe(r: OpResult) -> list[str]:
    return [
        r.op,
        format_size(r.value_size) if r.op != "exists" else "-",
        str(r.batch_size),
        f"{r.ops_per_s:,.0f}",
        f"{r.gbps:.2f}" if r.op != "exists" else "-",
        f"{r.p50_us:.0f}",
        f"{r.p99_us:.0f}",
        f"{r.baseline_gbps:.2f}" if r.baseline_gbps else "-",
        f"{r.ratio:.2f}" if r.ratio else "-",
        str(r.errors),
    ]
