"""Turning caller buffers into registered memory for the engine.

Registered buffers (Store.register_buffer) are used as they are. Others are registered for the
duration of one call (cheap, no copy); a buffer that cannot be registered (it overlaps a registered
one only partly) goes through the staging area with a copy.
"""

from __future__ import annotations

import ctypes
import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast, overload

import numpy as np

from kvstore.client.fields import first
from kvstore.client.gpu_buffers import GpuMemory, GpuStaged
from kvstore.client.gpu_pipeline import StagingPipeline
from kvstore.client.ranges import RangeTable, split
from kvstore.client.staging import Span, StagingArea
from kvstore.client.transfer_batch import MAX_REQUEST_PIECES, joined
from kvstore.errors import InvalidArgumentError, NoSpaceError
from transfer_engine import Region, TransferEngine, checksum, cuda
from transfer_engine.engine import buffer_spans


def as_bytes_view(buffer: Any, writable: bool) -> np.ndarray:
    """A flat uint8 view of a numpy array, bytearray, memoryview, bytes (read-only unless writable), or of
    raw memory given as (address, size) — which the caller must have registered and keep valid."""
    if isinstance(buffer, tuple):
        if len(buffer) != 2 or not all(isinstance(x, int) and x > 0 for x in buffer):
            raise InvalidArgumentError("raw memory is given as (address, size) with positive ints")
        addr, size = buffer
        return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(addr))
    if isinstance(buffer, np.ndarray):
        if not buffer.flags.c_contiguous:
            raise InvalidArgumentError("buffers must be C-contiguous")
        view = buffer if buffer.dtype == np.uint8 and buffer.ndim == 1 else buffer.reshape(-1).view(np.uint8)
    else:
        try:
            view = np.frombuffer(buffer, dtype=np.uint8)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"not a buffer: {type(buffer).__name__}") from exc
    if writable and not view.flags.writeable:
        raise InvalidArgumentError("the destination buffer is read-only")
    return view


def address_of(view: np.ndarray) -> int:
    """Start address of an array (cheaper than .ctypes.data)."""
    return int(view.__array_interface__["data"][0])


@dataclass(slots=True)
class SpanList:
    """One value's buffers as Spans (any buffer kind: registered, registered for the call, or staged)."""

    spans: list[Span]
    size: int = 0

    def __post_init__(self) -> None:
        self.size = sum(s.length for s in self.spans)

    def pieces(self, limit: int) -> tuple[list[int], list[int]]:
        """(addresses, lengths) of registered memory holding the value's first `limit` bytes."""
        return _first_bytes([s.addr for s in self.spans], [s.length for s in self.spans], limit)

    def clear(self) -> None:
        """Zeroes what a failed read may have written into the caller's memory (staging is scratch)."""
        for s in self.spans:
            if s.staged is None:
                s.view[:] = 0

    def release(self, manager: BufferManager, filled: int = 0) -> None:
        """Ends the call: the first `filled` staged bytes go to the caller's buffers first."""
        for s in self.spans:
            if s.staged is not None or s.temporary is not None:
                manager.release(s, copy_out=filled > 0, length=min(filled, s.length))
            filled -= min(filled, s.length)


# A value's piece column: a list, or (many pieces, from flat arrays) a numpy uint64 array, kept so that
# a batch's columns reach the engine without a round trip through Python ints.
Column = list[int] | np.ndarray


@dataclass(slots=True)
class RawPieces:
    """One value's buffers when every one is raw (address, size) memory inside long-lived registrations,
    as an engine's paged KV cache passes them: plain columns and no object per piece (thousands per
    batch)."""

    addrs: Column
    lengths: Column
    size: int

    def pieces(self, limit: int) -> tuple[Column, Column]:
        if limit >= self.size:
            return self.addrs, self.lengths
        return _first_bytes(ints(self.addrs), ints(self.lengths), limit)

    def clear(self) -> None:
        for addr, n in zip(ints(self.addrs), ints(self.lengths), strict=True):
            ctypes.memset(addr, 0, n)

    def release(self, manager: BufferManager, filled: int = 0) -> None:
        """Nothing to give back: the memory is the caller's, registered for good."""


def ints(column: Column) -> list[int]:
    """A piece column as Python ints."""
    return column.tolist() if isinstance(column, np.ndarray) else column


def _first_bytes(addrs: list[int], lengths: list[int], limit: int) -> tuple[list[int], list[int]]:
    """The pieces (addresses, lengths) that hold the first `limit` bytes of addrs/lengths."""
    if limit >= sum(lengths):
        return addrs, lengths
    kept: list[int] = []
    for n in lengths:
        n = min(limit, n)
        if n <= 0:
            break
        kept.append(n)
        limit -= n
    return addrs[: len(kept)], kept


ValueBuffers = SpanList | RawPieces | GpuStaged
_addrs, _lengths, _size = (operator.attrgetter(name) for name in ("addrs", "lengths", "size"))


def _raw_pieces(counts: list[int], addrs: list[int], lengths: list[int]) -> list[ValueBuffers]:
    """RawPieces per value from flat columns: value i is its counts[i] next pieces."""
    if len(addrs) == len(counts):  # (one piece each: the common case, without the splitting)
        return [RawPieces([a], [n], n) for a, n in zip(addrs, lengths, strict=True)]
    return [
        RawPieces(a, n, sum(n)) for a, n in zip(split(counts, addrs), split(counts, lengths), strict=True)
    ]


def _raw_piece_arrays(counts: np.ndarray, addrs: np.ndarray, lengths: np.ndarray) -> Sequence[ValueBuffers]:
    """_raw_pieces from uint64 arrays: many pieces per value stay arrays (PieceValues, no per-piece step)."""
    if addrs.size == counts.size:
        return _raw_pieces(counts.tolist(), addrs.tolist(), lengths.tolist())
    return PieceValues(addrs, lengths, counts)


class PieceValues(Sequence[RawPieces]):
    """Many values' raw pieces as the flat arrays they came in (value i: its counts[i] next pieces),
    with a RawPieces per value made only when asked for: the usual read hands the arrays to the engine as
    they are (kvstore.client.read_plan), where a value's own arrays cost a slice, then a join, per value.
    A slice of consecutive values is a PieceValues of the same arrays' range."""

    def __init__(self, addrs: np.ndarray, lengths: np.ndarray, counts: np.ndarray) -> None:
        self.addrs, self.lengths, self.counts = addrs, lengths, counts
        ends = np.cumsum(counts)
        self._starts = np.concatenate(([0], ends)).tolist()  # value i: pieces starts[i]..starts[i + 1]
        self.sizes: list[int] = (
            np.add.reduceat(lengths, self._starts[:-1]).tolist() if len(counts) and len(lengths) else []
        )
        self._made: list[RawPieces | None] = [None] * len(counts)

    def __len__(self) -> int:
        return len(self._made)

    @overload
    def __getitem__(self, i: int) -> RawPieces: ...
    @overload
    def __getitem__(self, i: slice) -> PieceValues: ...
    def __getitem__(self, i: int | slice) -> RawPieces | PieceValues:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise InvalidArgumentError("values are sliced in order")
            stop = max(start, stop)
            if start == 0 and stop == len(self):  # (the usual one-chunk read: no arrays made again)
                return self
            a, b = self._starts[start], self._starts[stop]
            return PieceValues(self.addrs[a:b], self.lengths[a:b], self.counts[start:stop])
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("value index out of range")
        made = self._made[i]
        if made is None:
            a, b = self._starts[i], self._starts[i + 1]
            made = self._made[i] = RawPieces(self.addrs[a:b], self.lengths[a:b], self.sizes[i])
        return made

    def read_columns(self, sizes: list[int]) -> tuple[list[int], tuple[Any, Any, Any]] | None:
        """read_columns() of these values: their arrays as they are (no step per value), when each value
        is exactly its object's size and no value has more pieces than one request takes."""
        if sizes != self.sizes or int(self.counts.max()) > MAX_REQUEST_PIECES:
            return None
        return [0] * len(sizes), (self.counts, self.addrs, self.lengths)

    def release(self, manager: BufferManager, filled: Sequence[int] = ()) -> None:
        """Ends a call's values (BufferManager.release_values): nothing to give back, the pieces are the
        caller's memory, registered for good."""


def read_columns(
    values: Sequence[ValueBuffers], sizes: list[int]
) -> tuple[list[int], tuple[Any, Any, Any] | None] | None:
    """The engine's local columns for reading objects of `sizes` into `values` in one call, when each
    value is raw memory that takes its object whole: (per value its one local address, or 0 where its
    pieces are given; None, or per value its piece count, addresses and lengths). None for any other
    batch (see kvstore.client.read_plan). Values of several pieces must be exactly their object's size."""
    if isinstance(values, PieceValues):  # (a batch's pieces as the caller's arrays)
        return values.read_columns(sizes)
    if set(map(type, values)) != {RawPieces}:
        return None
    lengths = list(map(_lengths, values))
    counts = list(map(len, lengths))
    if max(counts) > MAX_REQUEST_PIECES:  # (the general path splits such a value's requests)
        return None
    if max(counts) == 1 and set(map(type, lengths)) == {list}:
        if not all(map(operator.le, sizes, map(first, lengths))):  # (a buffer too small: said per key)
            return None
        return list(map(first, map(_addrs, values))), None
    if sizes == list(map(_size, values)):  # (a value cut short: the general path cuts it)
        return [0] * len(sizes), (counts, joined(list(map(_addrs, values))), joined(lengths))
    return None


def checksums(values: Sequence[ValueBuffers], sizes: Sequence[int]) -> list[int]:
    """XXH3-64 of each value's first sizes[i] bytes as they are in registered memory, in one call."""
    if set(map(type, values)) == {RawPieces} and list(map(_size, values)) == list(sizes):
        return _whole_checksums(cast("list[RawPieces]", values))
    addrs: list[int] = []
    lengths: list[int] = []
    counts: list[int] = []
    for value, size in zip(values, sizes, strict=True):
        a, n = value.pieces(size)
        addrs += ints(a)
        lengths += ints(n)
        counts.append(len(n))
    return checksum.xxh3_pieces(addrs, lengths, counts)


def _whole_checksums(values: Sequence[RawPieces]) -> list[int]:
    """checksums() of whole raw values (a put's, a paged cache's): their columns joined in C loops (or
    as arrays), no step per value."""
    lengths = list(map(_lengths, values))
    addrs = list(map(_addrs, values))
    counts = list(map(len, lengths))
    if any(isinstance(a, np.ndarray) for a in addrs):
        return checksum.xxh3_pieces(np.concatenate(addrs), np.concatenate(lengths), counts)
    flat = itertools.chain.from_iterable
    return checksum.xxh3_pieces(list(flat(addrs)), list(flat(lengths)), counts)


def piece_arrays(addrs: Any, lengths: Any, counts: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat piece arrays (value i: its counts[i] next pieces) as numpy arrays, checked: one address and
    one length per piece, counts that add up to them, at least one piece per value."""
    try:
        a = np.asarray(addrs, dtype=np.uint64)
        n = np.asarray(lengths, dtype=np.uint64)
        c = np.asarray(counts, dtype=np.int64)
    except (OverflowError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"pieces must be arrays of non-negative integers: {exc}") from None
    if a.ndim != 1 or n.ndim != 1 or c.ndim != 1 or a.size != n.size or int(c.sum()) != a.size:
        raise InvalidArgumentError("one address and one length per piece, and counts that add up to them")
    if c.size and int(c.min()) <= 0:
        raise InvalidArgumentError("every value needs at least one piece")
    return a, n, c


class BufferManager:
    def __init__(self, engine: TransferEngine, staging_size: int, pipeline_chunk: int = 0) -> None:
        self.engine = engine
        self._all = RangeTable()  # every long-lived registration (payload: its Region; tag 1: writable)
        self._raw = RangeTable()  # those given as raw (address, size) (payload: one view of it all)
        self.staging = StagingArea(engine, staging_size, 64)
        self.gpu = GpuMemory(engine, staging_size)
        self.pipeline = StagingPipeline(self.gpu, pipeline_chunk)

    # -- long-lived registrations ---------------------------------------------------------------------
    def register(self, buffer: Any) -> Region:
        if GpuMemory.is_gpu(buffer):
            return self.gpu.register(buffer)
        if isinstance(buffer, tuple):
            raw = as_bytes_view(buffer, writable=False)
            region = self.engine.register_ptr(address_of(raw), raw.nbytes, export=False)
            self._raw.add(region.addr, region.length, raw)
        else:
            region = self.engine.register(buffer, export=False)
        self._all.add(region.addr, region.length, region, tag=int(not region.read_only))
        return region

    def unregister(self, buffer: Any) -> None:
        if self.gpu.unregister(buffer):
            return
        addr = address_of(as_bytes_view(buffer, writable=False))
        region = self._all.pop(addr)
        if region is None:
            raise InvalidArgumentError("buffer is not registered")
        self._raw.pop(addr)
        self.engine.unregister(region)

    def _raw_span(self, addr: int, size: int) -> Span | None:
        """Raw memory inside a raw registration: a slice of that registration's one view (building a
        ctypes view per piece costs microseconds, and engines pass thousands of pieces per batch)."""
        hit = self._raw.containing(addr, size)
        if hit is None:
            return None
        base, whole = hit
        return Span(addr, size, whole[addr - base : addr - base + size])

    def _in_registrations(self, addrs: Any, lengths: Any, writable: bool) -> bool:
        """Whether every piece lies inside one long-lived host registration (a writable one when
        `writable`): raw pieces there are used as they are, in a few array operations for the batch."""
        tags = self._all.tags(addrs, lengths)
        return tags is not None and (not writable or bool(tags.all()))

    def _raw_values(self, counts: list[int], flat: list[Any], writable: bool) -> list[ValueBuffers] | None:
        """RawPieces (host) or GpuStaged (GPU) per value when every buffer of every value is raw memory
        inside a long-lived registration (resolved for the whole batch in a few array operations), else None.
        `flat`: every value's buffers in order, counts[i] of them value i's."""
        # Type checks as C-level loops (map/set): a Python loop per piece costs more than the rest.
        if set(map(type, flat)) != {tuple} or set(map(len, flat)) != {2}:
            return None
        addrs, lengths = (list(column) for column in zip(*flat, strict=True))
        if set(map(type, addrs)) != {int} or set(map(type, lengths)) != {int}:
            return None
        gpu = self.gpu.raw_values(addrs, lengths, counts)
        if gpu is not None:
            return list(gpu)
        if not self._in_registrations(addrs, lengths, writable):
            return None
        return _raw_pieces(counts, addrs, lengths)

    def _registered_values(
        self, counts: list[int], flat: list[Any], writable: bool
    ) -> list[ValueBuffers] | None:
        """RawPieces per value when every buffer is host memory (numpy arrays, bytearrays, ...) inside a
        long-lived registration, found in one call for the batch; else None (the per-buffer path, which
        registers for the call, stages, or says what is wrong)."""
        if tuple in set(map(type, flat)):
            return None
        spans = buffer_spans(flat, writable)
        if spans is None or self._all.tags(*spans) is None:
            return None
        return _raw_pieces(counts, *spans)

    def piece_values(self, addrs: Any, lengths: Any, counts: Any, writable: bool) -> Sequence[ValueBuffers]:
        """Values given as flat piece arrays (value i: its counts[i] next pieces): RawPieces when every
        piece is inside a long-lived registration (found in a few array operations), else via values()."""
        a, n, c = piece_arrays(addrs, lengths, counts)
        if c.size == 0:
            return []
        if self._in_registrations(a, n, writable):
            return _raw_piece_arrays(c, a, n)
        # GPU memory, or a piece outside every registration: values() moves it, or says which.
        flat = list(zip(a.tolist(), n.tolist(), strict=True))
        return self.values(list(split(c.tolist(), flat)), writable)

    def resolved(self, buffers: Sequence[Any], writable: bool) -> Sequence[ValueBuffers]:
        """Values already resolved (by piece_values) as they are; buffer lists through values()."""
        if isinstance(buffers, PieceValues):
            return buffers
        if buffers and isinstance(buffers[0], (RawPieces, SpanList, GpuStaged)):
            return list(buffers)
        return self.values(buffers, writable)

    def release_values(self, values: Sequence[ValueBuffers], filled: Sequence[int] = ()) -> None:
        """Ends a call's values: what resolved() made for it is given back (value i's first filled[i]
        staged bytes go to the caller's buffers first); the caller's raw pieces (PieceValues) need nothing."""
        if isinstance(values, PieceValues):
            values.release(self, filled)
            return
        for i, value in enumerate(values):
            value.release(self, filled[i] if i < len(filled) and filled[i] > 0 else 0)

    # -- per call ---------------------------------------------------------------------------------------
    def values(self, buffer_lists: Sequence[Sequence[Any]], writable: bool) -> list[ValueBuffers]:
        """Each value's buffers as registered memory for one call; release() each when it ends. GPU values
        get their host blocks here; `pipeline` moves their bytes (before a put sends, after a get reads)."""
        counts = [len(parts) for parts in buffer_lists]
        flat = [part for parts in buffer_lists for part in parts]
        out = None
        if flat and 0 not in counts:  # (the one-call paths; an empty value takes the per-buffer path's error)
            out = self._raw_values(counts, flat, writable) or self._registered_values(counts, flat, writable)
        if out is None:
            out = self._values(buffer_lists, writable)
        gpu = [value for value in out if isinstance(value, GpuStaged)]
        if gpu:
            try:
                self.gpu.stage(gpu)
            except BaseException:
                for value in out:
                    value.release(self)
                raise
        return out

    def _is_gpu(self, part: Any) -> bool:
        if isinstance(part, tuple):
            return self.gpu.holds(part)
        return cuda.is_gpu_buffer(part)

    def _values(self, buffer_lists: Sequence[Sequence[Any]], writable: bool) -> list[ValueBuffers]:
        out: list[ValueBuffers] = []
        try:
            for parts in buffer_lists:
                if any(self._is_gpu(part) for part in parts):
                    out.append(self.gpu.value(parts, writable))
                    continue
                spans: list[Span] = []
                try:
                    for b in parts:
                        spans.append(self.span(b, writable))
                finally:
                    out.append(SpanList(spans))
        except BaseException:
            for value in out:
                value.release(self)
            raise
        return out

    def span(self, buffer: Any, writable: bool) -> Span:
        if isinstance(buffer, tuple) and len(buffer) == 2 and all(type(x) is int and x > 0 for x in buffer):
            fast = self._raw_span(*buffer)
            if fast is not None:
                return fast
        view = as_bytes_view(buffer, writable)
        if view.nbytes == 0:
            raise InvalidArgumentError("empty buffer")
        addr = address_of(view)
        hit = self._all.containing(addr, view.nbytes)
        if hit is not None:
            if writable and hit[1].read_only:  # (raw memory inside a buffer registered read-only)
                raise InvalidArgumentError("the destination is inside a buffer registered read-only")
            return Span(addr, view.nbytes, view)
        if isinstance(buffer, tuple):
            raise InvalidArgumentError(
                "raw (address, size) memory must be registered with register_buffer first"
            )
        try:
            region = self.engine.register(view, export=False)
            return Span(addr, view.nbytes, view, temporary=region)
        except InvalidArgumentError:
            return self.stage(view, copy_in=not writable)

    def stage(self, view: np.ndarray, copy_in: bool) -> Span:
        block = self.staging.take(view.nbytes)
        if block is None:
            raise NoSpaceError(f"staging area cannot hold {view.nbytes} bytes; register the buffer instead")
        if copy_in:
            block.view[:] = view
        block.view = view  # the caller's buffer; block.staged stays the staging copy
        return block

    def scratch(self, size: int) -> Span:
        """Registered memory of `size` bytes to read into (its bytes are the result: nothing to copy out):
        staging, or a fresh buffer when it is full."""
        return self.staging.scratch(size)

    def release(self, span: Span, copy_out: bool = False, length: int = 0) -> None:
        """Ends a span; copy_out moves `length` staged bytes into the caller's buffer first."""
        if span.staged is not None and copy_out and span.view is not span.staged:
            span.view[:length] = span.staged[:length]
        self.staging.release(span)

    def close(self) -> None:
        """Stops the staging pipeline's helper thread; the registrations go with the engine."""
        self.pipeline.close()
