"""`kvstore bench tier --tier disk|pinned|gpu`: a tier under a store, beside the machine's own baseline.

--tier pinned: a node with a page-locked segment (`--pinned`); batch put and get of `--batch-size` values
beside memcpy of the same block size over the same working set (the transfer is a memcpy between the
client's and the node's memory, shared or over the engine).

--tier gpu: the same node, with the client's values in GPU memory (put from it, get into it; they move
through the client's page-locked staging, checksummed there). Baseline: batched device->host (write) and
host->device (read) copies of the same shape between device memory and pinned host memory.

--tier disk:

A master in this process and one node process with a small memory segment over a disk file (in `--dir`,
default the working directory). Puts of `--total` bytes, back to back, overflow memory, so the master
demotes them and puts wait for the demotions they need; the demotion rate is the disk bytes written per
second over the whole run (an object evicted before it was demoted counts as a miss). Then every object
only on disk is read back in batches of `--batch-size` (read from the file by this process, the node's
host): get GB/s and per-batch p50/p99. The baseline, measured in the same run on the same file system, is
sequential O_DIRECT writes and reads of the same value size at the same depth (kvstore's own DiskFile,
same I/O backend).
"""

from __future__ import annotations

import mmap
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvstore.errors import InvalidArgumentError, NotSupportedError
from transfer_engine.disk import DiskFile

if TYPE_CHECKING:
    from kvstore import Store


@dataclass
class TierBenchConfig:
    directory: str = "."
    value_size: int = 1 << 20
    batch_size: int = 32
    total: int = 512 << 20  # bytes put: several times the memory segment
    memory: int = 128 << 20
    backend: str = "auto"

    def validate(self) -> None:
        if self.value_size < 4096 or self.value_size % 4096:
            raise InvalidArgumentError("--value-size must be a multiple of 4KiB")
        if self.total < 4 * self.memory or self.memory < 4 * self.batch_size * self.value_size:
            raise InvalidArgumentError("need --total >= 4x memory and memory >= 4 batches of values")


@dataclass
class TierBenchResult:
    tier: str
    backend: str
    value_size: int
    batch_size: int
    objects: int
    demote_gbps: float
    get_gbps: float
    get_p50_ms: float
    get_p99_ms: float
    baseline_write_gbps: float
    baseline_read_gbps: float
    misses: int

    @property
    def demote_ratio(self) -> float:
        return self.demote_gbps / self.baseline_write_gbps if self.baseline_write_gbps else 0.0

    @property
    def get_ratio(self) -> float:
        return self.get_gbps / self.baseline_read_gbps if self.baseline_read_gbps else 0.0


def baseline(cfg: TierBenchConfig, path: Path) -> tuple[float, float, str]:
    """Sequential O_DIRECT write then read of `total` bytes in value-size requests, batch-size deep."""
    size = min(cfg.total, 1 << 30)
    buf = np.frombuffer(mmap.mmap(-1, cfg.batch_size * cfg.value_size), np.uint8)
    buf[:] = 1
    with DiskFile(str(path), size, backend=cfg.backend, depth=cfg.batch_size) as f:
        out = []
        for write in (True, False):
            start = time.perf_counter()
            for at in range(0, size, cfg.batch_size * cfg.value_size):
                n = min(cfg.batch_size, (size - at) // cfg.value_size)
                offsets = [at + i * cfg.value_size for i in range(n)]
                addrs = [buf.ctypes.data + i * cfg.value_size for i in range(n)]
                if f.run([write] * n, addrs, offsets, [cfg.value_size] * n).any():
                    raise NotSupportedError(f"direct I/O on {path} failed")
            out.append(size / (time.perf_counter() - start) / 1e9)
        return out[0], out[1], f.backend


def run_pinned(cfg: TierBenchConfig) -> TierBenchResult:
    """Batch put and get through a node whose segment is pinned, beside memcpy of the same shape."""
    from transfer_engine.bench import memcpy_gbps

    cfg.validate()
    values = np.random.default_rng(0).integers(0, 256, (cfg.batch_size, cfg.value_size), dtype=np.uint8)
    back = np.empty_like(values)

    def check() -> bool:
        return bool(np.array_equal(back, values))

    with _pinned_node(cfg) as (store, pinned_by):
        store.register_buffer(values)
        store.register_buffer(back)
        put_s, get_s, misses = _put_get_rounds(cfg, store, list(values), list(back), check)
    copy = memcpy_gbps(cfg.value_size, cfg.memory // 2, 1.0)
    return _result("pinned", pinned_by, cfg, put_s, get_s, misses, copy, copy)


def run_gpu(cfg: TierBenchConfig) -> TierBenchResult:
    """Batch put from and get into GPU memory through a node with a pinned segment, beside plain batched
    device<->pinned-host copies (cuMemcpyAsync on one stream, one wait) of the same shape."""
    from transfer_engine import cuda

    cfg.validate()
    cuda.require()
    per_batch = cfg.batch_size * cfg.value_size
    values = np.random.default_rng(0).integers(0, 256, per_batch, dtype=np.uint8)
    with cuda.DeviceMemory(per_batch) as src, cuda.DeviceMemory(per_batch) as dst:
        cuda.copy_to_device(0, [src.ptr], [values.ctypes.data], [per_batch])
        sources = [src.buffer.piece(i * cfg.value_size, cfg.value_size) for i in range(cfg.batch_size)]
        targets = [dst.buffer.piece(i * cfg.value_size, cfg.value_size) for i in range(cfg.batch_size)]

        def check() -> bool:
            back = np.empty(per_batch, np.uint8)
            cuda.copy_to_host(0, [dst.ptr], [back.ctypes.data], [per_batch])
            return bool(np.array_equal(back, values))

        with _pinned_node(cfg) as (store, pinned_by):
            store.register_buffer(src.buffer)
            store.register_buffer(dst.buffer)
            put_s, get_s, misses = _put_get_rounds(cfg, store, sources, targets, check)
        to_host, to_device = _cuda_copy_baseline(cfg, src)
    return _result(
        "gpu", f"staged via {pinned_by}-pinned host", cfg, put_s, get_s, misses, to_host, to_device
    )


def _cuda_copy_baseline(cfg: TierBenchConfig, memory: object) -> tuple[float, float]:
    """GB/s of batched device->host and host->device copies between `memory` and pinned host memory."""
    from transfer_engine import TransferEngine, cuda

    assert isinstance(memory, cuda.DeviceMemory)
    n, size = cfg.batch_size, cfg.value_size
    with TransferEngine() as engine:
        host = engine.allocate(n * size, export=False, pinned=True)
        device_ptrs = [memory.ptr + i * size for i in range(n)]
        host_ptrs = [host.addr + i * size for i in range(n)]
        out = []
        for copy in (cuda.copy_to_host, cuda.copy_to_device):
            copy(0, device_ptrs, host_ptrs, [size] * n)  # warm up
            rounds, start = 0, time.perf_counter()
            while time.perf_counter() - start < 1.0:
                copy(0, device_ptrs, host_ptrs, [size] * n)
                rounds += 1
            out.append(rounds * n * size / (time.perf_counter() - start) / 1e9)
        return out[0], out[1]


@contextmanager
def _pinned_node(cfg: TierBenchConfig) -> Iterator[tuple[Store, str]]:
    """A master in this process, one node process with a pinned segment, and a client: (store, how the
    node pinned its segment)."""
    from kvstore import Store
    from kvstore.config import MasterConfig
    from kvstore.master import Master
    from kvstore.procs import kvstore_process

    master = Master.start_in_thread(MasterConfig.load(port=0, busy_poll_us=0))
    try:
        node = ["node", "--master", master.address, "--segment-size", str(cfg.memory), "--pinned"]
        with kvstore_process(node) as (_, ready), Store.connect(master.address, rpc_busy_poll_us=0) as store:
            yield store, ready.split()[-1].removeprefix("pinned=")
    finally:
        master.stop()


def _put_get_rounds(
    cfg: TierBenchConfig, store: Store, sources: list[Any], targets: list[Any], check: Callable[[], bool]
) -> tuple[list[float], list[float], int]:
    """About two seconds of gets: rounds that put half the node's memory in batches (each batch from
    `sources`), read each batch back into `targets`, then remove the round's keys. Per-batch put and get
    seconds, and misses (a failed put or get, or wrong bytes at the end, counts)."""
    count = cfg.memory // 2 // cfg.value_size
    put_s: list[float] = []
    get_s: list[float] = []
    misses = round_ = 0
    while sum(get_s) < 2.0 and round_ < 1000:
        keys = [f"tier/{round_}/{i}" for i in range(count)]
        for i in range(0, count, cfg.batch_size):
            batch = keys[i : i + cfg.batch_size]
            t0 = time.perf_counter()
            codes = store.batch_put_from(batch, sources[: len(batch)])
            put_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got = store.batch_get_into(batch, targets[: len(batch)])
            get_s.append(time.perf_counter() - t0)
            misses += sum(1 for c in codes if c) + sum(1 for g in got if g != cfg.value_size)
        store.batch_remove(keys, force=True)
        round_ += 1
    return put_s, get_s, misses + (0 if check() else 1)


def _result(
    tier: str,
    backend: str,
    cfg: TierBenchConfig,
    put_s: list[float],
    get_s: list[float],
    misses: int,
    baseline_write: float,
    baseline_read: float,
) -> TierBenchResult:
    per_batch = cfg.batch_size * cfg.value_size
    return TierBenchResult(
        tier,
        backend,
        cfg.value_size,
        cfg.batch_size,
        len(get_s) * cfg.batch_size,
        per_batch * len(put_s) / sum(put_s) / 1e9,
        per_batch * len(get_s) / sum(get_s) / 1e9,
        float(np.percentile(get_s, 50) * 1e3),
        float(np.percentile(get_s, 99) * 1e3),
        baseline_write,
        baseline_read,
        misses,
    )


def run(cfg: TierBenchConfig) -> TierBenchResult:
    from kvstore import Store
    from kvstore.config import MasterConfig
    from kvstore.master import Master
    from kvstore.procs import kvstore_process

    cfg.validate()
    # Everything the bench writes lives in one temporary directory there, removed as a whole at the end.
    with tempfile.TemporaryDirectory(dir=cfg.directory, prefix="kvstore-tier-bench-") as where:
        disk = Path(where).resolve() / "tier"  # absolute: the node process runs in another directory
        write_gbps, read_gbps, backend = baseline(cfg, Path(where) / "baseline")
        # Puts wait as long as demotion needs (the bench measures the disk; a busy machine may be slow).
        config = MasterConfig.load(
            port=0, busy_poll_us=0, demote_watermark=0.5, heartbeat_interval=0.3, put_room_wait=30.0
        )
        master = Master.start_in_thread(config)
        node = [
            "node", "--master", master.address, "--segment-size", str(cfg.memory),
            "--disk", str(disk), "--disk-size", str(2 * cfg.total), "--disk-backend", cfg.backend,
        ]  # fmt: skip
        try:
            with kvstore_process(node), Store.connect(master.address, rpc_busy_poll_us=0) as store:
                return _measure(cfg, store, master.master.state, backend, write_gbps, read_gbps)
        finally:
            master.stop()


def _measure(
    cfg: TierBenchConfig, store: object, state: object, backend: str, write_gbps: float, read_gbps: float
) -> TierBenchResult:
    from kvstore import Store
    from kvstore.master.service.state import MasterState

    assert isinstance(store, Store) and isinstance(state, MasterState)
    count = cfg.total // cfg.value_size
    value = np.random.default_rng(0).integers(0, 256, cfg.value_size, dtype=np.uint8)
    store.register_buffer(value)
    keys = [f"tier-bench/{i}" for i in range(count)]
    # Puts back to back: once memory is full of objects still being demoted, each put waits for the
    # demotion of the object it evicts (put_room_wait), so puts run at the pace demotion sustains.
    start = time.perf_counter()
    for i in range(0, count, cfg.batch_size):
        batch = keys[i : i + cfg.batch_size]
        store.batch_put_from(batch, [value] * len(batch))
    deadline = time.monotonic() + 30
    while state.disk.tasks and time.monotonic() < deadline:
        time.sleep(0.0005)
    demote_gbps = state.disk.demotions * cfg.value_size / (time.perf_counter() - start) / 1e9
    lost = state.counters.evictions - state.counters.evictions_to_disk  # evicted before demoted
    on_disk = [
        k for k in keys if (meta := state.objects.get(k)) is not None and not meta.replicas and meta.disk
    ]
    targets = [np.empty(cfg.value_size, np.uint8) for _ in range(cfg.batch_size)]
    for t in targets:
        store.register_buffer(t)
    seconds, misses, moved = [], 0, 0
    for i in range(0, len(on_disk), cfg.batch_size):
        batch = on_disk[i : i + cfg.batch_size]
        t0 = time.perf_counter()
        got = store.batch_get_into(batch, targets[: len(batch)])
        seconds.append(time.perf_counter() - t0)
        misses += sum(1 for g in got if g != cfg.value_size)
        moved += sum(1 for g in got if g == cfg.value_size) * cfg.value_size
    if not all(np.array_equal(t, value) for t in targets):
        misses += 1  # wrong bytes would count as a failure, never as speed
    misses += lost
    return TierBenchResult(
        "disk",
        backend,
        cfg.value_size,
        cfg.batch_size,
        len(on_disk),
        demote_gbps,
        moved / sum(seconds) / 1e9 if seconds else 0.0,
        float(np.percentile(seconds, 50) * 1e3) if seconds else 0.0,
        float(np.percentile(seconds, 99) * 1e3) if seconds else 0.0,
        write_gbps,
        read_gbps,
        misses,
    )
