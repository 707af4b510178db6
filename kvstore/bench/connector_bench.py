"""`kvstore bench connector`: what an engine connector adds on top of the store's own batch put/get.

For a named model's KV geometry it saves and loads one request's blocks (a) through the connectors' data
path, in the engine's own layout, and (b) with plain batch put/get of the same bytes from one contiguous
buffer per object, in the same run. This module runs SGLang's dense case (one object per page: its K, then
its V, from a page_first host pool, with the existence check that skips stored pages, as
kvstore.integrations.sglang_pools moves it); vLLM's cases, the dense one included (head-slice members of
each block at TP=1, as the vLLM worker moves them since 2026-12-07), run in kvstore.bench.connector_cases.
The ratio is the connector's overhead. The engines themselves are not needed (their metadata bookkeeping
is not on the data path); the `engines` test tier runs the same code under the real vLLM and SGLang.
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from kvstore.bench.models import MODELS
from kvstore.bench.store_bench import _baseline as transport_baseline
from kvstore.integrations.paged import Batch, BlockMover, PagedCache, StoreLink, layer_geometry
from kvstore.store import Store


@dataclass
class ConnectorBenchResult:
    engine: str
    model: str
    blocks: int  # per request
    object_bytes: int
    requests: int
    save_gbps: float
    load_gbps: float
    store_put_gbps: float
    store_get_gbps: float
    save_p50_ms: float
    load_p50_ms: float
    store_put_p50_ms: float
    store_get_p50_ms: float
    errors: int = 0
    notes: list[str] = field(default_factory=list)
    # The fields below came with the hybrid and tp-mismatch cases (kvstore.bench.connector_cases).
    case: str = "dense"
    write_tp: int = 1  # TP ranks that save
    read_tp: int = 1  # TP ranks that load
    kv_cache_groups: int = 1
    head_split: int = 1  # store group members per block and KV cache group (1: one object per block)
    window: int = 0  # hybrid: the sliding window in tokens
    objects_saved: int = 0  # per request, over all ranks
    objects_loaded: int = 0
    bytes_saved: int = 0  # per request, over all ranks
    bytes_loaded: int = 0
    reader_bytes: list[int] = field(default_factory=list)  # per request, each reading rank's share
    # The machine's ceiling for the same bytes, measured in the same run (memcpy for a same-host node, a
    # raw TCP stream for tcp; kvstore.bench.store_bench): None when the node is out of reach of either.
    baseline_gbps: float | None = None
    baseline_kind: str | None = None

    @property
    def save_overhead(self) -> float:
        return 1 - self.save_gbps / self.store_put_gbps if self.store_put_gbps else 0.0

    @property
    def load_overhead(self) -> float:
        return 1 - self.load_gbps / self.store_get_gbps if self.store_get_gbps else 0.0


BASELINE_SECONDS = 1.0


def measure_baseline(store: Store, object_bytes: int, working_set: int) -> tuple[float | None, str | None]:
    """(GB/s, what) of the machine's own carrier for objects of this size: after the paths are timed, so
    it never competes with them."""
    found = transport_baseline(store, max(4096, object_bytes), max(working_set, 64 << 20), BASELINE_SECONDS)
    return found if found is not None else (None, None)


def print_result(r: ConnectorBenchResult) -> None:
    """The result as lines a person reads (the JSON has every field)."""
    if r.case == "dense":
        print(
            f"{r.engine} connector, {r.model}: {r.blocks} blocks/request of {r.object_bytes / 2**20:.2f} MiB "
            f"objects, {r.requests} requests"
        )
    else:
        shape = f"window {r.window} tokens" if r.case == "hybrid" else f"TP={r.write_tp} -> TP={r.read_tp}"
        print(
            f"{r.engine} connector, {r.case} {r.model} ({shape}, {r.kv_cache_groups} KV cache groups, "
            f"{r.head_split} members per group): {r.blocks} blocks/request, {r.requests} requests\n"
            f"  per request: saves {r.objects_saved} objects ({r.bytes_saved / 2**20:.1f} MiB), loads "
            f"{r.objects_loaded} ({r.bytes_loaded / 2**20:.1f} MiB; per reading rank "
            f"{', '.join(f'{b / 2**20:.1f}' for b in r.reader_bytes)} MiB)"
        )
    print(
        f"  save {r.save_gbps:6.2f} GB/s  p50 {r.save_p50_ms:7.2f} ms   "
        f"store put {r.store_put_gbps:6.2f} GB/s  p50 {r.store_put_p50_ms:7.2f} ms   "
        f"overhead {r.save_overhead:+.1%}\n"
        f"  load {r.load_gbps:6.2f} GB/s  p50 {r.load_p50_ms:7.2f} ms   "
        f"store get {r.store_get_gbps:6.2f} GB/s  p50 {r.store_get_p50_ms:7.2f} ms   "
        f"overhead {r.load_overhead:+.1%}"
    )
    if r.baseline_gbps is not None:
        print(f"  baseline {r.baseline_gbps:6.2f} GB/s ({r.baseline_kind})")
    if r.errors:
        print(f"  ERRORS: {r.errors} objects failed or bytes differed")


@contextlib.contextmanager
def startup_heap_frozen() -> Iterator[None]:
    """The heap so far left out of the collector's scans while the paths are timed, as vLLM's engine
    core freezes its heap after startup. Otherwise a full collection of this process's imports and
    set-up (~13 ms here) lands in one of the ~20 timed requests of one path or the other, by chance:
    it moved a run's connector overhead by ±9 points."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def gbps(seconds: list[float], moved: int) -> float:
    return moved / sum(seconds) / 1e9 if seconds else 0.0


def p50_ms(seconds: list[float]) -> float:
    return float(np.median(seconds) * 1e3) if seconds else 0.0


Step = Callable[[int], int]  # one path's timed step for request i: the bytes it moved


def alternating_rounds(
    save: Step, put: Step, load: Step, get: Step, requests: int, after: Callable[[int], object]
) -> dict[str, tuple[list[float], int]]:
    """Times the connector's steps (save, load) and the store's (put, get) request by request, with the
    startup heap frozen: which path goes first swaps every request (the second finds the caches as the
    first left them, and neither may always have that); `after(i)` ends request i (outside the timing).
    Round 0 warms up connections and memory and is not counted. Per step name: its seconds per request
    and the bytes it moved in all."""
    connector_first = [("save", save), ("put", put), ("load", load), ("get", get)]
    store_first = [("put", put), ("save", save), ("get", get), ("load", load)]
    timings: dict[str, tuple[list[float], int]] = {}
    with startup_heap_frozen():
        for i in range(requests + 1):
            for name, step in connector_first if i % 2 else store_first:
                start = time.perf_counter()
                moved = step(i)
                seconds = time.perf_counter() - start
                if i:
                    total = timings.get(name, ([], 0))
                    timings[name] = ([*total[0], seconds], total[1] + moved)
            after(i)
    return timings


Rates = tuple[float, float, float, float, float, float, float, float]


def rates(timings: dict[str, tuple[list[float], int]]) -> Rates:
    """ConnectorBenchResult's throughput and p50 fields, in its order, from the timed rounds of each path
    (save, load, put, get: each its seconds per request and the bytes it moved in all)."""
    paths = [timings[name] for name in ("save", "load", "put", "get")]
    save, load, put, get = (gbps(seconds, moved) for seconds, moved in paths)
    save_ms, load_ms, put_ms, get_ms = (p50_ms(seconds) for seconds, _ in paths)
    return save, load, put, get, save_ms, load_ms, put_ms, get_ms


def mapped_memory(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random uint16 values in memory of its own mapping. Both paths use such memory so that they differ
    only in the connector: numpy would give the flat buffers (>= 4 MiB) huge pages and not the smaller
    per-layer tensors, and page size alone moves copy and hash speed by ~30% here. 4 KiB pages are what
    engines get by default (torch does not ask for transparent huge pages unless told to)."""
    count = int(np.prod(shape))
    out = np.frombuffer(mmap.mmap(-1, count * 2), dtype=np.uint16).reshape(shape)
    out[...] = rng.integers(0, 2**16, shape, dtype=np.uint16)
    return out


class _Layout:
    """The engine's KV memory and the object buffers for block/page b."""

    def __init__(self, engine: str, model: str, blocks: int, seed: int) -> None:
        layers, heads, dim, elem, tokens = MODELS[model]
        rng = np.random.default_rng(seed)
        self.engine = engine
        if engine != "sglang":
            raise ValueError("this layout is SGLang's (vLLM's cases run in kvstore.bench.connector_cases)")
        # SGLang's page_first host pool: [K|V, tokens, layers, heads, dim]; a page is one object (K, V)
        pool = mapped_memory((2, blocks * tokens, layers, heads, dim), rng)
        self.tensors = [pool]
        self.cache = PagedCache([layer_geometry("k", pool[0].reshape(blocks, -1))])
        self.kv_offset = pool[1].ctypes.data - pool[0].ctypes.data
        self.objects_per_block = 1
        self.object_bytes = layers * heads * tokens * 2 * dim * elem // self.objects_per_block

    def objects(self, blocks: int) -> list[list[tuple[int, int]]]:
        """The buffers of every object of blocks 0..blocks-1, as the connector computes them."""
        out = []
        for block in range(blocks):  # (as kvstore.integrations.sglang_pools: the page's K, then its V)
            addr, size = self.cache.layers[0].span(block)
            out.append([(addr, size), (addr + self.kv_offset, size)])
        return out

    def equal(self, other: _Layout) -> bool:
        return all(np.array_equal(a, b) for a, b in zip(self.tensors, other.tensors, strict=True))


def run(master: str, engine: str, model: str, blocks: int, requests: int) -> ConnectorBenchResult:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    store = Store.connect(master)
    mover = BlockMover(StoreLink.wrapping(store))
    try:
        source, target = _Layout(engine, model, blocks, 1), _Layout(engine, model, blocks, 2)
        for layout in (source, target):
            layout.cache.register(store)
        per_request = blocks * layout.objects_per_block * layout.object_bytes
        flat_src = mapped_memory((per_request // 2,), np.random.default_rng(3)).view(np.uint8)
        flat_dst = mapped_memory((per_request // 2,), np.random.default_rng(4)).view(np.uint8)
        store.register_buffer(flat_src)
        store.register_buffer(flat_dst)
        errors = 0

        def keys(tag: str, i: int) -> list[str]:
            return [
                f"bench-{tag}-{i}-{uuid.uuid4().hex[:8]}-{j}"
                for j in range(blocks * source.objects_per_block)
            ]

        def batch(layout: _Layout, names: list[str]) -> Batch:
            b = Batch()
            for name, parts in zip(names, layout.objects(blocks), strict=True):
                b.add(name, parts)
            return b

        saved: list[list[str]] = []

        def save(i: int) -> int:
            nonlocal errors
            names = keys("c", i)
            if engine == "sglang":  # the backend checks existence first and writes only missing pages
                store.batch_exists(names)
            ok = mover.save_here(batch(source, names))  # (SGLang calls from its own I/O threads)
            errors += len(ok) - sum(ok)
            saved.append(names)
            return sum(ok) * source.object_bytes

        def load(i: int) -> int:
            nonlocal errors
            ok = mover.load_here(batch(target, saved[i]))
            errors += len(ok) - sum(ok)
            return sum(ok) * source.object_bytes

        plain: list[list[str]] = []
        views_src = np.split(flat_src, blocks * source.objects_per_block)
        views_dst = np.split(flat_dst, blocks * source.objects_per_block)

        def put(i: int) -> int:
            nonlocal errors
            names = keys("s", i)
            codes = store.batch_put_from(names, views_src)
            errors += sum(1 for c in codes if c < 0)
            plain.append(names)
            return sum(1 for c in codes if c >= 0) * source.object_bytes

        def get(i: int) -> int:
            nonlocal errors
            got = store.batch_get_into(plain[i], views_dst)
            errors += sum(1 for g in got if g != source.object_bytes)
            return sum(1 for g in got if g == source.object_bytes) * source.object_bytes

        # Remove each request's objects once read back, so the working set is one request whatever the
        # node's size.
        timings = alternating_rounds(
            save, put, load, get, requests, lambda i: store.batch_remove(saved[i] + plain[i], force=True)
        )
        if not target.equal(source) or not np.array_equal(flat_src, flat_dst):
            errors += 1
        objects = blocks * source.objects_per_block
        baseline = measure_baseline(store, source.object_bytes, per_request)
        return ConnectorBenchResult(
            engine,
            model,
            blocks,
            source.object_bytes,
            requests,
            *rates(timings),
            errors=errors,
            objects_saved=objects,
            objects_loaded=objects,
            bytes_saved=per_request,
            bytes_loaded=per_request,
            reader_bytes=[per_request],
            baseline_gbps=baseline[0],
            baseline_kind=baseline[1],
        )
    finally:
        mover.close()
        store.close()
