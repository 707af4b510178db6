"""`kvstore bench master`: the master's own metadata rates, with a load the client library does not limit.

The cluster is the one a deployment has: the master in its own process and one storage node process
(whose segment is sized to hold every object, so nothing is evicted). Each of `clients` load processes
speaks the RPC directly (kvstore.cluster.master_client): it registers, then per batch of keys sends
put_start + put_end (a put's metadata work; no bytes are written, the master does not read them), then
get_replicas (a get's: locate), then exists. A process reports per op its rate (keys per second) and the
latency of each request (a put: its start and end together); rates of concurrent processes add up. The
master's resident memory is read from /proc before the puts and after all ops: the growth per object
stored.

With `pipeline` above 1, each load process keeps that many requests in flight: as many threads, each on a
connection of its own, take the batches in turn (a thread packs its next request while the others wait
for replies), so one load process keeps the master busy instead of waiting a round trip per batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvstore.bench import load_procs
from kvstore.cluster.master_client import MasterClient
from kvstore.cluster.shards import SHARD_SEPARATOR, split_by_shard, split_shards
from kvstore.errors import InvalidArgumentError, KVStoreError
from kvstore.procs import kvstore_process, settle_collector
from kvstore.rpc import messages as m
from kvstore.rpc.etcd import MAX_SHARDS
from kvstore.rpc.validate import MAX_KEYS, MAX_PUT_ITEMS

OPS = ("put", "get", "exists")
MAX_PIPELINE = 64


@dataclass
class MasterBenchConfig:
    objects: int = 200_000
    """Objects each client puts (and then locates and checks)."""
    batch_size: int = 1000
    value_size: int = 1024
    clients: int = 1
    ops: tuple[str, ...] = OPS
    pipeline: int = 1
    """Requests each load process keeps in flight (threads, each on its own connection)."""
    shards: int = 1
    """Masters the key space is split over (a process each, `kvstore master --shard I --shards S`, one
    node joined to all); each load process routes every key to its shard's master."""

    def validate(self) -> None:
        if not self.ops or not set(self.ops) <= set(OPS):
            raise InvalidArgumentError(f"--ops takes a comma list of {', '.join(OPS)}")
        if "put" not in self.ops:
            raise InvalidArgumentError("--ops must include put: get and exists read what the puts stored")
        if min(self.objects, self.batch_size, self.value_size, self.clients) <= 0:
            raise InvalidArgumentError("objects, batch size, value size and clients must be positive")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise InvalidArgumentError(f"--shards is 1..{MAX_SHARDS}")
        if not 1 <= self.pipeline <= MAX_PIPELINE:
            raise InvalidArgumentError(f"--pipeline is 1..{MAX_PIPELINE}")
        if self.batch_size > min(MAX_PUT_ITEMS, MAX_KEYS):
            raise InvalidArgumentError(
                f"--batch-size is at most {min(MAX_PUT_ITEMS, MAX_KEYS)} (a request's bound)"
            )

    def segment_size(self) -> int:
        """Room for every object of every client (bytes and fence slots: a node has one slot per 2 KiB,
        kvstore.node.memory_tier), with a margin under the eviction watermark."""
        per_object = max(self.value_size, 2048)
        size = max(64 << 20, self.objects * self.clients * per_object * 5 // 4)
        return size if self.shards == 1 else 2 * size  # (split evenly: room for a shard's share that is over)


@dataclass
class OpRate:
    op: str
    clients: int
    per_s: float
    p50_us: float
    p99_us: float
    errors: int = 0
    pipeline: int = 1  # requests each load process kept in flight
    keys: int = 0  # (how the rates of several load processes combine: keys over their common span)
    started: float = 0.0  # wall clock
    ended: float = 0.0
    # the masters' CPU (all shards together) and the node's, per key, over the op's span; and the busiest
    # master's CPU over that span (1.0: it used a core all along). Measured by the orchestrator (run).
    master_cpu_us: float = 0.0
    node_cpu_us: float = 0.0
    busiest_master_cpu: float = 0.0


@dataclass
class MemoryUse:
    """The master after the run: memory per object, and how long its loop was held (kvstore.master.
    loop_watch: its longest turn, a big request included; the longest periodic or scrape-time task)."""

    objects: int
    rss_bytes_per_object: float
    loop_turn_max_ms: float = 0.0
    task_max_ms: dict[str, float] = field(default_factory=dict)


@contextlib.contextmanager
def sharded_cluster(cfg: MasterBenchConfig) -> Iterator[tuple[str, list[int], int]]:
    """`cfg.shards` master processes and a storage node joined to all; yields (the masters' list in shard
    order, ';'-separated, as clients are given it; their pids; the node's pid). One shard is a plain master
    (store_bench.process_cluster's)."""
    with contextlib.ExitStack() as stack:
        addresses, pids = [], []
        for shard in range(cfg.shards):
            sharding = ["--shard", str(shard), "--shards", str(cfg.shards)] if cfg.shards > 1 else []
            master, ready = stack.enter_context(kvstore_process(["master", "--port", "0", *sharding]))
            addresses.append(ready.split()[0])
            pids.append(master.pid)
        masters = SHARD_SEPARATOR.join(addresses)
        node_args = ["node", "--master", masters, "--segment-size", str(cfg.segment_size())]
        node, _ = stack.enter_context(kvstore_process(node_args))
        yield masters, pids, node.pid


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise KVStoreError(f"no resident set size for process {pid}")


def run(
    cfg: MasterBenchConfig, progress: Callable[[str], None] | None = None
) -> tuple[list[OpRate], MemoryUse]:
    """Orchestrates: the cluster, then `clients` load processes; gathers what they report, and the CPU
    the masters and the node used during each op."""
    cfg.validate()
    with sharded_cluster(cfg) as (masters, master_pids, node_pid):
        before = sum(map(rss_bytes, master_pids))
        args = [
            "bench",
            "master",
            "--mode",
            "client",
            "--master",
            masters,
            "--objects",
            str(cfg.objects),
            "--batch-size",
            str(cfg.batch_size),
            "--value-size",
            str(cfg.value_size),
            "--ops",
            ",".join(cfg.ops),
            "--pipeline",
            str(cfg.pipeline),
            "--json",
        ]
        with CpuSampler([*master_pids, node_pid]) as cpu:
            per_client = load_procs.gather(args, cfg.clients, OpRate, progress)
        objects = cfg.objects * cfg.clients
        grown = sum(map(rss_bytes, master_pids)) - before
        held = [_loop_held(address) for address in split_shards(masters)]
        tasks: dict[str, float] = {}  # (each task's longest run on any shard)
        for _, shard_tasks in held:
            for task, ms in shard_tasks.items():
                tasks[task] = max(tasks.get(task, 0.0), ms)
        memory = MemoryUse(objects, grown / objects, max(turn for turn, _ in held), tasks)
    return [cpu.charge(rate, len(master_pids)) for rate in combine(per_client)], memory


class CpuSampler:
    """Samples the CPU time (user + system) of some processes every 20 ms on a thread, so the CPU each
    used during an op's span (its wall-clock start and end) can be read after the run."""

    PERIOD = 0.02

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.times: list[float] = []
        self.cpu: list[list[float]] = []  # per sample, each process's CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-cpu", daemon=True)

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self.PERIOD):
            self._sample()

    def _sample(self) -> None:
        self.cpu.append([cpu_seconds(pid) for pid in self.pids])
        self.times.append(time.time())

    def used(self, started: float, ended: float) -> np.ndarray:
        """Each process's CPU seconds between two wall-clock times (interpolated between samples)."""
        cpu = np.asarray(self.cpu)
        return np.array(
            [
                np.interp(ended, self.times, column) - np.interp(started, self.times, column)
                for column in cpu.T
            ]
        )

    def charge(self, rate: OpRate, masters: int) -> OpRate:
        """`rate` with the CPU per key its span cost the masters (the first `masters` pids) and the node."""
        used = self.used(rate.started, rate.ended)
        span = max(rate.ended - rate.started, 1e-9)
        keys = max(rate.keys, 1)
        return dataclasses.replace(
            rate,
            master_cpu_us=float(used[:masters].sum()) / keys * 1e6,
            node_cpu_us=float(used[masters:].sum()) / keys * 1e6,
            busiest_master_cpu=float(used[:masters].max()) / span,
        )


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system (/proc/PID/stat's utime and stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loop_held(address: str) -> tuple[float, dict[str, float]]:
    """The master's longest loop turn and its tasks' longest runs, ms (its Stats carry them; a scrape of
    them while the table is full is one of the tasks). A run shorter than the housekeeping period (0.5 s)
    waits for its first round, so the periodic tasks are measured too."""
    master = MasterClient(address)
    try:
        master.call(m.Stats())  # (so the scrape itself is measured at the table's full size)
        stats: dict[str, float] = master.call(m.Stats())
        deadline = time.monotonic() + 2.0
        while "expire_max_ms" not in stats and time.monotonic() < deadline:
            time.sleep(0.05)
            stats = master.call(m.Stats())
    finally:
        master.close()
    tasks = {k.removesuffix("_max_ms"): v for k, v in stats.items() if k.endswith("_max_ms")}
    return tasks.pop("loop_turn", 0.0), tasks


def run_mooncake(cfg: MasterBenchConfig, python: str) -> tuple[list[OpRate], MemoryUse]:
    """Mooncake's master in the same shape (kvstore.bench.mooncake_bench, a standalone script run with
    `python`: the interpreter of a virtual environment with mooncake-transfer-engine-non-cuda)."""
    from kvstore.bench.mooncake_side import run_mooncake_side

    args = ["--objects", str(cfg.objects), "--clients", str(cfg.clients), "--pipeline", str(cfg.pipeline)]
    args += ["--batch-size", str(cfg.batch_size), "--value-size", str(cfg.value_size)]
    rows = run_mooncake_side(python, args)
    try:
        rates = [OpRate(**r) for r in rows if "op" in r and r["op"] in cfg.ops]
        (memory,) = [MemoryUse(**r) for r in rows if "rss_bytes_per_object" in r]
    except (ValueError, TypeError) as exc:
        raise KVStoreError(f"Mooncake's side printed what this bench cannot read: {exc}") from exc
    return rates, memory


def combine(per_client: list[list[OpRate]]) -> list[OpRate]:
    """Concurrent clients: their keys over the span from the first one's start to the last one's end (a
    sum of each one's rate would count a client that ran alone for a while as if all had); latency is
    the worst client's."""
    if not per_client or any(len(rows) != len(per_client[0]) for rows in per_client) or not per_client[0]:
        raise KVStoreError("bench clients reported different ops, or none")
    combined = []
    for rows in zip(*per_client, strict=True):
        started, ended = min(r.started for r in rows), max(r.ended for r in rows)
        keys = sum(r.keys for r in rows)
        combined.append(
            OpRate(
                rows[0].op,
                len(rows),
                keys / (ended - started),
                max(r.p50_us for r in rows),
                max(r.p99_us for r in rows),
                sum(r.errors for r in rows),
                rows[0].pipeline,
                keys,
                started,
                ended,
            )
        )
    return combined


# -- one load process ---------------------------------------------------------------------------------
def client_main(cfg: MasterBenchConfig, address: str) -> int:
    """`--mode client`: one JSON line per op (kvstore.bench.load_procs)."""
    return load_procs.report(_load(cfg, address))


def _load(cfg: MasterBenchConfig, address: str) -> Iterator[OpRate]:
    token = m.new_token()
    client_id = m.client_id_for(token)  # (an id is its token's)
    # Threads of a pipeline wait for replies asleep: a thread's busy poll would hold the GIL the others need.
    poll = 100 if cfg.pipeline == 1 else 0
    with contextlib.ExitStack() as stack:
        masters = []  # per shard (one: today's cluster)
        for shard_address in split_shards(address):
            master = MasterClient(shard_address, busy_poll_us=poll)
            stack.callback(master.close)
            stack.enter_context(_registered(master, client_id, token))
            masters.append(master)
        keys = [f"bm/{client_id}/{i}" for i in range(cfg.objects)]
        batches = _batches(keys, len(masters), cfg.batch_size)
        settle_collector()  # the keys are walked by no collection (45 ms a full one at 1.5M keys)
        ops = {"put": _put, "get": _get, "exists": _exists}
        for op in cfg.ops:
            one = ops[op](masters, client_id, cfg.value_size)
            yield _measure(op, batches, one, cfg.pipeline)


Batch = tuple[int, list[str]]  # (the shard whose master is asked, its keys)


def _batches(keys: list[str], shards: int, size: int) -> list[Batch]:
    """Each shard's keys in batches of `size`, the shards taken in turn (a load process alternates
    between them, so every shard's master is kept busy at once)."""
    by_shard = [[keys[i] for i in at] for at in split_by_shard(keys, shards)]
    per_shard = [[(s, k[at : at + size]) for at in range(0, len(k), size)] for s, k in enumerate(by_shard)]
    turns = itertools.zip_longest(*per_shard)
    return [batch for turn in turns for batch in turn if batch is not None]


@contextlib.contextmanager
def _registered(master: MasterClient, client_id: str, token: str) -> Iterator[None]:
    """Registered as a client, with heartbeats on a thread of their own (as a Store's session sends
    them: a client that stops is dropped, its puts in progress revoked), closed at the end."""
    master.identify(client_id, token)  # (its puts, heartbeats and close are in its own name)
    terms: m.RegisterReply = master.call(
        m.RegisterClient(client_id=client_id, host_id=f"bench-{os.getpid()}", token=token)
    )
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(terms.heartbeat_interval):
            with contextlib.suppress(KVStoreError):
                master.call(m.Heartbeat(client_id=client_id))

    beats = threading.Thread(target=beat, name="bench-heartbeat", daemon=True)
    beats.start()
    try:
        yield
    finally:
        stop.set()
        beats.join()
        with contextlib.suppress(KVStoreError):
            master.call(m.CloseClient(client_id=client_id), timeout=2.0)


def _measure(op: str, batches: Sequence[Batch], one: Callable[[Batch], int], pipeline: int = 1) -> OpRate:
    """Runs `one` per batch (it returns the batch's failures), `pipeline` at a time (threads taking the
    batches in turn); keys per second over the whole run."""
    latencies = np.empty(len(batches))
    errors = [0] * pipeline
    failed: list[BaseException] = []

    def stream(first: int) -> None:
        try:
            for i in range(first, len(batches), pipeline):
                t = time.perf_counter()
                errors[first] += one(batches[i])
                latencies[i] = time.perf_counter() - t
        except BaseException as exc:  # (re-raised by the caller: a thread's failure fails the run)
            failed.append(exc)

    wall, started = time.time(), time.perf_counter()
    threads = [threading.Thread(target=stream, args=(t,), name=f"bench-{op}-{t}") for t in range(1, pipeline)]
    for thread in threads:
        thread.start()
    stream(0)
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failed:
        raise failed[0]
    keys = sum(len(keys) for _, keys in batches)
    p50, p99 = np.percentile(latencies, [50, 99]) * 1e6
    return OpRate(
        op, 1, keys / elapsed, float(p50), float(p99), sum(errors), pipeline, keys, wall, wall + elapsed
    )


# The same work per reply as Mooncake's load (kvstore.bench.mooncake_bench load_main): a get decodes its
# reply into the records a client reads, as Mooncake's batch_get_replica_desc builds its descriptors; put
# and exists replies, which Mooncake's side reads as return codes, are read raw (MasterClient.call(raw=True):
# an item result is [code, message, value]).
def _put(masters: list[MasterClient], client_id: str, size: int) -> Callable[[Batch], int]:
    def one(batch: Batch) -> int:
        shard, keys = batch
        items = [m.PutItem(key, size, i + 1) for i, key in enumerate(keys)]
        started = masters[shard].call(m.PutStart(client_id=client_id, items=items, replicas=1), raw=True)
        placed = [key for key, r in zip(keys, started, strict=True) if r[0] == 0 and r[2]]
        ended = masters[shard].call(m.PutEnd(client_id=client_id, keys=placed), raw=True) if placed else []
        return len(keys) - sum(1 for r in ended if r[0] == 0)

    return one


def _get(masters: list[MasterClient], client_id: str, size: int) -> Callable[[Batch], int]:
    def one(batch: Batch) -> int:
        shard, keys = batch
        found = masters[shard].call(m.GetReplicas(keys=keys))
        return sum(1 for loc in found if loc is None)

    return one


def _exists(masters: list[MasterClient], client_id: str, size: int) -> Callable[[Batch], int]:
    def one(batch: Batch) -> int:
        shard, keys = batch
        return sum(1 for there in masters[shard].call(m.Exists(keys=keys), raw=True) if not there)

    return one
