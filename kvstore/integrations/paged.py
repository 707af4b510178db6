"""What every engine connector needs, whatever the engine: a store connection that survives a dead master,
the geometry of an engine's paged KV cache (which bytes are block b of layer l), and block moves that run
beside the engine's own work.

A block of a request is one object holding that block of every layer (K and V as the engine lays them
out), so one batch put or get moves a whole prefix; the object's key is the block's prefix-chained hash
plus the rank that wrote it (kvstore.blocks).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from kvstore.errors import InvalidArgumentError, KVStoreError, NotSupportedError
from kvstore.store import Store
from transfer_engine import cuda

log = logging.getLogger("kvstore.integrations")

# Settings every connector takes from its engine's extra config, each falling back to its KVSTORE_*
# variable (Store.connect reads those): the names are StoreConfig's.
CONNECTOR_SETTINGS = ("master", "namespace", "replicas", "transport", "load_deadline_ms", "head_split")
RECONNECT_SECONDS = 5.0  # after a failed connection, how long lookups report misses before trying again


def store_settings(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """Store.connect keywords from a connector's extra config (unknown keys are an error)."""
    extra = dict(extra or {})
    unknown = sorted(set(extra) - set(CONNECTOR_SETTINGS) - {"buffer_size", "rpc_timeout"})
    if unknown:
        raise InvalidArgumentError(
            f"unknown kvstore connector setting(s) {unknown}; known: {', '.join(CONNECTOR_SETTINGS)}, "
            "buffer_size, rpc_timeout"
        )
    return {k: v for k, v in extra.items() if v not in (None, "")}


class StoreLink:
    """A Store client made on first use. While the master cannot be reached, `get()` returns None
    (callers report a miss and skip saves) and retries at most every RECONNECT_SECONDS: an engine keeps
    serving, it only recomputes."""

    def __init__(self, settings: Mapping[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = dict(settings)
        self._clock = clock
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._retry_at = 0.0
        self.last_error: str = ""

    @classmethod
    def wrapping(cls, store: Store) -> StoreLink:
        """A link over a client the caller already made (and closes)."""
        link = cls({})
        link._store = store
        return link

    def get(self) -> Store | None:
        with self._lock:
            if self._store is None and self._clock() >= self._retry_at:
                try:
                    self._store = Store.connect(**self.settings)
                    self.last_error = ""
                except InvalidArgumentError:
                    raise  # a configuration mistake: say it at once, do not retry it forever
                except KVStoreError as exc:
                    self.last_error = str(exc)
                    self._retry_at = self._clock() + RECONNECT_SECONDS
                    log.warning("kvstore unreachable (%s); retrying in %.0f s", exc, RECONNECT_SECONDS)
            return self._store

    def current(self) -> Store | None:
        """The client if connected (never connects)."""
        return self._store

    def namespace(self) -> str:
        """The configured namespace (extra config, else KVSTORE_NAMESPACE), without connecting."""
        from kvstore.config import StoreConfig

        return StoreConfig.load(**self.settings).namespace

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


@dataclass(frozen=True)
class LayerGeometry:
    """Where a layer's block b lives: base + b * block_stride, block_bytes long."""

    name: str
    base: int
    block_stride: int
    block_bytes: int
    num_blocks: int
    storage: tuple[int, int]  # the whole allocation the layer is a view of: (address, bytes)

    def span(self, block: int) -> tuple[int, int]:
        if not 0 <= block < self.num_blocks:
            raise InvalidArgumentError(f"block {block} outside layer {self.name} ({self.num_blocks} blocks)")
        return (self.base + block * self.block_stride, self.block_bytes)


def layer_geometry(name: str, tensor: Any) -> LayerGeometry:
    """Geometry of one layer's paged cache: a torch tensor or a numpy array whose first dimension is the
    block (vLLM >= 0.32: [blocks, heads, block_tokens, K|V]; SGLang host pools: [pages, ...]). Each block
    must be contiguous; blocks may be strided (several layers sharing one allocation)."""
    if hasattr(tensor, "data_ptr"):  # torch
        require_movable_device(name, tensor)
        if tensor.dim() < 1 or tensor.shape[0] == 0:
            raise InvalidArgumentError(f"layer {name} has no blocks")
        if not tensor[0].is_contiguous():
            raise NotSupportedError(f"layer {name}: a block is not contiguous (strides {tensor.stride()})")
        elem = tensor.element_size()
        return LayerGeometry(
            name,
            tensor.data_ptr(),
            tensor.stride(0) * elem,
            tensor[0].numel() * elem,
            int(tensor.shape[0]),
            allocation(tensor),
        )
    shape = getattr(tensor, "shape", None)
    if shape is None or not hasattr(tensor, "__array_interface__"):
        raise InvalidArgumentError(f"layer {name}: not a tensor or array ({type(tensor).__name__})")
    if len(shape) < 1 or shape[0] == 0:
        raise InvalidArgumentError(f"layer {name} has no blocks")
    if not tensor[0].flags.c_contiguous:
        raise NotSupportedError(f"layer {name}: a block is not contiguous (strides {tensor.strides})")
    return LayerGeometry(
        name,
        int(tensor.__array_interface__["data"][0]),
        int(tensor.strides[0]),
        int(tensor[0].nbytes),
        int(shape[0]),
        allocation(tensor),
    )


def require_movable_device(name: str, tensor: Any) -> None:
    """Refuses layer `name`'s torch tensor unless it is on the CPU, or on a GPU with CUDA available here."""
    device = getattr(getattr(tensor, "device", None), "type", "cpu")
    if device == "cuda":
        try:
            cuda.require()
        except NotSupportedError as exc:
            raise NotSupportedError(f"layer {name} is on the GPU, but {exc}") from exc
    elif device != "cpu":
        raise NotSupportedError(f"layer {name} is on {device}: kvstore moves CPU and CUDA tensors only")


def allocation(tensor: Any) -> tuple[int, int]:
    """(address, bytes) of the whole allocation a CPU or CUDA tensor or array is a view of."""
    if hasattr(tensor, "untyped_storage"):
        storage = tensor.untyped_storage()
        return (storage.data_ptr(), storage.nbytes())
    owner = tensor
    while getattr(owner, "base", None) is not None and hasattr(owner.base, "__array_interface__"):
        owner = owner.base
    return (int(owner.__array_interface__["data"][0]), int(owner.nbytes))


def merge_spans(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Memory ranges merged where they overlap (aliasing views), so each is registered exactly once."""
    merged: list[tuple[int, int]] = []
    for addr, size in sorted(set(spans)):
        if merged and addr < merged[-1][0] + merged[-1][1]:
            last_addr, last_size = merged[-1]
            merged[-1] = (last_addr, max(last_addr + last_size, addr + size) - last_addr)
        else:
            merged.append((addr, size))
    return merged


class Registrations:
    """Engine memory registered with the store once (allocations, merged where they alias)."""

    def __init__(self, spans: Sequence[tuple[int, int]]) -> None:
        self.spans = merge_spans(spans)
        self._done: list[tuple[int, int]] = []

    def register(self, store: Store) -> None:
        for span in self.spans:
            if span not in self._done:
                store.register_buffer(span)
                self._done.append(span)

    def unregister(self, store: Store) -> None:
        for span in self._done:
            store.unregister_buffer(span)
        self._done.clear()


class PagedCache(Registrations):
    """An engine's paged KV cache: its layers in a fixed order, registered with the store once per
    allocation (layers that are views of one tensor share a registration)."""

    def __init__(self, layers: Sequence[LayerGeometry]) -> None:
        if not layers:
            raise InvalidArgumentError("no KV cache layers to register")
        super().__init__([layer.storage for layer in layers])
        self.layers = list(layers)
        self.block_bytes = sum(layer.block_bytes for layer in self.layers)
        self._bases = np.array([layer.base for layer in self.layers], dtype=np.int64)
        self._strides = np.array([layer.block_stride for layer in self.layers], dtype=np.int64)
        self._num_blocks = np.array([layer.num_blocks for layer in self.layers], dtype=np.int64)
        self._sizes = [layer.block_bytes for layer in self.layers]

    def buffers(self, blocks: Sequence[int]) -> list[tuple[int, int]]:
        """One object's buffers: the block's bytes in every layer, in layer order. `blocks` gives the
        block index per layer (engines with several KV groups place one token range in different blocks)."""
        if len(blocks) != len(self.layers):
            raise InvalidArgumentError(f"{len(blocks)} block ids for {len(self.layers)} layers")
        return [layer.span(b) for layer, b in zip(self.layers, blocks, strict=True)]

    def many_pieces(self, rows: Sequence[Sequence[int]]) -> Pieces:
        """buffers() of many objects as flat arrays (a batch has thousands of pieces): `rows` holds, per
        object, its block index per layer."""
        blocks = np.asarray(rows, dtype=np.int64).reshape(len(rows), -1) if len(rows) else np.zeros((0, 0))
        if len(rows) and blocks.shape[1] != len(self.layers):
            raise InvalidArgumentError(
                f"block ids must be given per object and per layer ({len(self.layers)})"
            )
        outside = (blocks < 0) | (blocks >= self._num_blocks) if len(rows) else np.zeros(0, dtype=bool)
        if outside.any():
            row, layer = (int(x[0]) for x in np.nonzero(outside))
            raise InvalidArgumentError(
                f"block {int(blocks[row, layer])} outside layer {self.layers[layer].name} "
                f"({self.layers[layer].num_blocks} blocks)"
            )
        addrs = (self._bases + blocks * self._strides).astype(np.uint64).ravel()
        lengths = np.tile(np.asarray(self._sizes, dtype=np.uint64), len(rows))
        return Pieces(addrs, lengths, np.full(len(rows), len(self.layers), dtype=np.int64))

    def many_buffers(self, rows: Sequence[Sequence[int]]) -> list[list[tuple[int, int]]]:
        """many_pieces() as one list of (address, size) per object."""
        p = self.many_pieces(rows)
        addrs = p.addrs.reshape(len(rows), -1).tolist()
        return [list(zip(row, self._sizes, strict=True)) for row in addrs]


class Pieces(NamedTuple):
    """Objects' local pieces as flat arrays: object i is its counts[i] next (addrs, lengths) pieces."""

    addrs: np.ndarray
    lengths: np.ndarray
    counts: np.ndarray


@dataclass
class MoveStats:
    """Counters a connector reports to its engine (vLLM's connector stats, SGLang's logs)."""

    loads: int = 0
    loaded_blocks: int = 0
    loaded_bytes: int = 0
    load_seconds: float = 0.0
    failed_loads: int = 0
    saves: int = 0
    saved_blocks: int = 0
    saved_bytes: int = 0
    save_seconds: float = 0.0
    failed_saves: int = 0
    lookups: int = 0
    lookup_hits: int = 0  # blocks found by lookups

    def count(self, kind: str, good: int, failed: int, moved: int, seconds: float) -> None:
        """One batch move of `kind` ("load" or "save")."""
        if kind == "load":
            self.loads += 1
            self.loaded_blocks += good
            self.loaded_bytes += moved
            self.failed_loads += failed
            self.load_seconds += seconds
        else:
            self.saves += 1
            self.saved_blocks += good
            self.saved_bytes += moved
            self.failed_saves += failed
            self.save_seconds += seconds

    def take(self) -> MoveStats:
        """These counts, and zero them (one reporting interval)."""
        out = MoveStats(**vars(self))
        for name in vars(self):
            setattr(self, name, type(getattr(self, name))())
        return out


@dataclass
class Batch:
    """One batch of block moves: keys and each key's buffers, with what the caller wants back."""

    keys: list[str] = field(default_factory=list)
    buffers: list[list[tuple[int, int]]] = field(default_factory=list)
    tags: list[Any] = field(default_factory=list)  # per key, returned with its outcome
    pieces: Pieces | None = None  # instead of `buffers`: every key's pieces as flat arrays

    def add(self, key: str, buffers: list[tuple[int, int]], tag: Any = None) -> None:
        self.keys.append(key)
        self.buffers.append(buffers)
        self.tags.append(tag)


class BlockMover:
    """Runs batch puts and gets on background threads so they overlap the engine's compute. Saves run
    in submission order on one thread; loads on another (a load never waits behind a save); a load
    the caller waits for at once runs on the caller's thread (load_here)."""

    def __init__(self, link: StoreLink, replicas: int | None = None) -> None:
        self.link = link
        self.replicas = replicas
        self.stats = MoveStats()
        self._stats_lock = threading.Lock()
        self._saver = ThreadPoolExecutor(1, thread_name_prefix="kvstore-save")
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="kvstore-load")

    def load(self, batch: Batch) -> Future[list[bool]]:
        """Reads each key into its buffers; per key True when every byte arrived and verified."""
        return self._loader.submit(self._load, batch)

    def load_here(self, batch: Batch) -> list[bool]:
        """load() on the calling thread, for a caller that would wait for it at once: no thread to wake,
        nor to wake the caller again (each hand-off cost 60-100 µs here, ~10% of a 16 MiB load)."""
        return self._load(batch)

    def save(self, batch: Batch) -> Future[list[bool]]:
        """Stores each key from its buffers; per key True when stored (or already stored)."""
        return self._saver.submit(self._save, batch)

    def save_here(self, batch: Batch) -> list[bool]:
        """save() on the calling thread (an engine that calls the store from its own I/O thread)."""
        return self._save(batch)

    def _load(self, batch: Batch) -> list[bool]:
        def get(store: Store, sizes: list[int]) -> list[bool]:
            # The load budget (StoreConfig.load_deadline_ms): what has not arrived by then is a load error,
            # recomputed by the engine, and lands nowhere after this batch returns.
            deadline = store.config.load_deadline_ms / 1000 or None
            if batch.pieces is not None:
                results = store.batch_get_into_pieces(batch.keys, *batch.pieces, deadline=deadline)
            else:
                results = store.batch_get_into_multi_buffers(batch.keys, batch.buffers, deadline=deadline)
            return [r == size for r, size in zip(results, sizes, strict=True)]  # (an error is < 0)

        return self._move("load", batch, get)

    def _save(self, batch: Batch) -> list[bool]:
        def put(store: Store, sizes: list[int]) -> list[bool]:
            if batch.pieces is not None:
                codes = store.batch_put_from_pieces(batch.keys, *batch.pieces, replicas=self.replicas)
            else:
                codes = store.batch_put_from_multi_buffers(batch.keys, batch.buffers, replicas=self.replicas)
            return [c >= 0 for c in codes]

        return self._move("save", batch, put)

    def _move(self, kind: str, batch: Batch, move: Callable[[Store, list[int]], list[bool]]) -> list[bool]:
        """Runs one batch move and counts it; any failure is a per-key False, never an exception."""
        if not batch.keys:
            return []
        start = time.perf_counter()
        sizes = _sizes(batch)
        store = self.link.get()
        ok = [False] * len(batch.keys)
        if store is not None:
            try:
                ok = move(store, sizes)
            except KVStoreError as exc:
                log.warning("kvstore %s of %d blocks failed: %s", kind, len(batch.keys), exc)
        moved = sum(itertools.compress(sizes, ok))
        with self._stats_lock:
            self.stats.count(kind, sum(ok), len(ok) - sum(ok), moved, time.perf_counter() - start)
        return ok

    def take_stats(self) -> MoveStats:
        with self._stats_lock:
            return self.stats.take()

    def count_lookup(self, hits: int) -> None:
        with self._stats_lock:
            self.stats.lookups += 1
            self.stats.lookup_hits += hits

    def drain(self) -> None:
        """Waits for every move submitted so far."""
        for pool in (self._saver, self._loader):
            pool.submit(lambda: None).result()

    def close(self) -> None:
        self._saver.shutdown(wait=True)
        self._loader.shutdown(wait=True)


def _sizes(batch: Batch) -> list[int]:
    if batch.pieces is not None:
        if not batch.keys:
            return []
        p = batch.pieces
        return np.add.reduceat(p.lengths, np.cumsum(p.counts) - p.counts).tolist()
    return [sum(size for _, size in parts) for parts in batch.buffers]


def leading_run(present: Sequence[bool], ranks: int) -> int:
    """Blocks stored for every one of `ranks` writers, from the start: `present` holds, per block, one
    flag per rank in rank order."""
    if ranks <= 0 or len(present) % ranks:
        raise InvalidArgumentError("existence flags do not divide into ranks")
    for block in range(len(present) // ranks):
        if not all(present[block * ranks : (block + 1) * ranks]):
            return block
    return len(present) // ranks


def full_blocks(num_tokens: int, block_size: int) -> int:
    return max(0, num_tokens) // block_size


def ceil_blocks(num_tokens: int, block_size: int) -> int:
    return math.ceil(max(0, num_tokens) / block_size)
