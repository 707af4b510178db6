"""The value-set rules that the store's read and write sides share, in kvstore.client.buffers:
read_columns gives the engine the same columns for a batch of raw values whether they came as the
caller's flat arrays (PieceValues) or one by one (RawPieces), and refuses every batch the one-call round
cannot read whole; release_values gives back what a call made (staged bytes copied out first, as far as
each value was filled) and leaves the caller's raw pieces alone."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from kvstore.client.buffers import BufferManager, PieceValues, RawPieces, SpanList, ints, read_columns
from kvstore.client.transfer_batch import MAX_REQUEST_PIECES
from transfer_engine import TransferEngine

STAGING = 1 << 20


@pytest.fixture
def manager() -> Iterator[BufferManager]:
    with TransferEngine(transport="local") as engine:
        yield BufferManager(engine, STAGING)


def registered(manager: BufferManager, size: int = 1 << 16) -> np.ndarray:
    array = np.zeros(size, dtype=np.uint8)
    manager.register(array)
    return array


def pieces_of(array: np.ndarray, counts: list[int], length: int = 64) -> tuple[list[int], list[int]]:
    """counts[i] pieces of `length` bytes per value, every other 64-byte slot of the array."""
    base = array.ctypes.data
    addrs = [base + 128 * k for k in range(sum(counts))]
    return addrs, [length] * len(addrs)


def test_flat_arrays_and_values_one_by_one_give_the_same_columns(manager: BufferManager) -> None:
    array = registered(manager)
    counts = [3, 1, 5, 2]
    addrs, lengths = pieces_of(array, counts)
    flat = manager.piece_values(addrs, lengths, counts, writable=True)
    assert isinstance(flat, PieceValues)
    one_by_one = [flat[i] for i in range(len(counts))]  # the same values as a list of RawPieces
    assert all(isinstance(value, RawPieces) for value in one_by_one)
    sizes = [64 * n for n in counts]
    for values in (flat, one_by_one):
        columns = read_columns(values, sizes)
        assert columns is not None
        local, pieces = columns
        assert local == [0] * len(counts) and pieces is not None
        assert list(pieces[0]) == counts
        assert ints(pieces[1]) == addrs and ints(pieces[2]) == lengths
    cut_short = [sizes[0] - 1, *sizes[1:]]  # (a value one byte shorter than its object: read in rounds)
    assert read_columns(flat, cut_short) is None and read_columns(one_by_one, cut_short) is None


def test_one_piece_values_are_read_at_their_address_when_they_hold_the_object(manager: BufferManager) -> None:
    array = registered(manager)
    values = manager.values([[array[:4096]], [array[8192:12288]]], writable=True)
    assert all(isinstance(value, RawPieces) for value in values)
    assert read_columns(values, [4096, 100]) == ([array.ctypes.data, array.ctypes.data + 8192], None)
    assert read_columns(values, [4096, 4097]) is None  # a buffer too small is said per key, by the rounds


def test_batches_the_one_call_cannot_read_whole_are_refused(manager: BufferManager) -> None:
    array = registered(manager, 2 * (MAX_REQUEST_PIECES + 1))
    addrs = (array.ctypes.data + 2 * np.arange(MAX_REQUEST_PIECES + 1)).tolist()
    many = manager.piece_values(addrs, [1] * len(addrs), [len(addrs)], writable=True)
    assert read_columns(many, [len(addrs)]) is None  # more pieces than one engine request takes
    other = np.zeros(4096, dtype=np.uint8)  # not registered: a SpanList for the call
    spans = manager.values([[other], [array[:4096]]], writable=True)
    try:
        assert isinstance(spans[0], SpanList)
        assert read_columns(spans, [4096, 4096]) is None
    finally:
        manager.release_values(spans)


def test_release_copies_out_what_was_filled_and_frees_the_staging(
    manager: BufferManager,
) -> None:
    callers = [np.full(4096, 7, dtype=np.uint8), np.full(4096, 7, dtype=np.uint8)]
    values = [SpanList([manager.stage(view, copy_in=False)]) for view in callers]
    for value in values:
        staged = value.spans[0].staged
        assert staged is not None and staged is not value.spans[0].view
        staged[:] = 1
    assert manager.staging.take(STAGING) is None  # (the blocks are held)
    manager.release_values(values, [100])  # value 0 read 100 bytes; value 1 none (no result)
    assert (callers[0][:100] == 1).all() and (callers[0][100:] == 7).all()
    assert (callers[1] == 7).all()
    whole = manager.staging.take(STAGING)  # every block given back: the whole area is free again
    assert whole is not None
    manager.staging.release(whole)


def test_release_leaves_the_callers_raw_pieces_alone(manager: BufferManager) -> None:
    array = registered(manager)
    array[:] = 5
    counts = [3, 1, 5]
    addrs, lengths = pieces_of(array, counts)
    flat = manager.piece_values(addrs, lengths, counts, writable=True)
    listed = manager.values([[(a, n)] for a, n in zip(addrs, lengths, strict=True)], writable=True)
    assert isinstance(flat, PieceValues) and all(isinstance(value, RawPieces) for value in listed)
    manager.release_values(flat, [64 * n for n in counts])
    manager.release_values(listed, [64] * len(listed))
    assert (array == 5).all()
    assert manager.piece_values(addrs, lengths, counts, writable=True).sizes == flat.sizes  # still registered
