"""A batch's buffers resolved to registered memory: the one-call paths (raw pieces, and host buffers
inside long-lived registrations) agree with the per-buffer path, and anything else falls back to it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import xxhash

from kvstore.client.buffers import BufferManager, RawPieces, SpanList, checksums, ints
from kvstore.errors import InvalidArgumentError
from transfer_engine import TransferEngine


@pytest.fixture
def manager() -> Iterator[BufferManager]:
    with TransferEngine(transport="local") as engine:
        yield BufferManager(engine, 1 << 20)


def test_rows_of_a_registered_array_are_resolved_in_one_call(manager: BufferManager) -> None:
    array = np.zeros((8, 4096), dtype=np.uint8)
    manager.register(array)
    values = manager.values([[row] for row in array] + [[array[0], array[1, :100]]], writable=True)
    assert all(isinstance(v, RawPieces) for v in values)
    assert values[3].pieces(4096) == ([array[3].ctypes.data], [4096])
    assert values[8].size == 4196
    assert values[8].pieces(4100) == ([array[0].ctypes.data, array[1].ctypes.data], [4096, 4])


def test_other_buffers_take_the_per_buffer_path(manager: BufferManager) -> None:
    registered = np.zeros(4096, dtype=np.uint8)
    manager.register(registered)
    other = np.zeros(4096, dtype=np.uint8)  # not registered: registered for the call
    values = manager.values([[registered], [other]], writable=True)
    assert all(isinstance(v, SpanList) for v in values)
    for v in values:
        v.release(manager)
    with pytest.raises(InvalidArgumentError, match="read-only"):
        manager.values([[registered], [b"read-only bytes"]], writable=True)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        manager.values([[np.zeros((64, 64), dtype=np.uint8)[:, :8]]], writable=True)


def test_pieces_inside_a_registered_array_are_resolved_in_one_call(manager: BufferManager) -> None:
    """Raw (address, size) pieces inside a registered array (not only inside a raw registration) are used
    as they are; inside a read-only one they are for reading from only: a get into them takes the
    per-buffer path, which refuses them."""
    array = np.zeros((4, 4096), dtype=np.uint8)
    manager.register(array)
    base = array.ctypes.data
    addrs, lengths, counts = [base, base + 8192, base + 4096], [100, 4096, 50], [2, 1]
    for writable in (False, True):
        values = manager.piece_values(addrs, lengths, counts, writable=writable)
        assert all(isinstance(v, RawPieces) for v in values)
        pieces = values[0].pieces(4196)
        assert (ints(pieces[0]), ints(pieces[1])) == ([base, base + 8192], [100, 4096])
        assert values[1].size == 50 and ints(values[0].pieces(200)[1]) == [100, 100]
    frozen = np.zeros(8192, dtype=np.uint8)
    frozen.flags.writeable = False
    manager.register(frozen)
    at = frozen.ctypes.data
    assert isinstance(manager.piece_values([at], [64], [1], writable=False)[0], RawPieces)
    with pytest.raises(InvalidArgumentError):
        manager.piece_values([at], [64], [1], writable=True)


def test_checksums_of_whole_raw_values_match_value_by_value(manager: BufferManager) -> None:
    """Whole raw values are hashed from their joined columns; any other mix value by value: the same
    digests, and those of xxhash over the bytes."""
    array = np.frombuffer(np.random.default_rng(1).bytes(4 * 4096), dtype=np.uint8).reshape(4, 4096)
    manager.register(array)
    values = manager.values([[array[0]], [array[1], array[2, :7]], [array[3, :1]]], writable=False)
    assert all(isinstance(v, RawPieces) for v in values)
    expected = [
        xxhash.xxh3_64_intdigest(b)
        for b in (array[0].tobytes(), array[1].tobytes() + array[2, :7].tobytes(), array[3, :1].tobytes())
    ]
    assert checksums(values, [v.size for v in values]) == expected  # whole values: the joined columns
    assert checksums(values, [4096, 4100, 1]) == [expected[0], _digest(array[1], array[2, :4]), expected[2]]
    spans = manager.values([[bytes(array[0])]], writable=False)  # not raw: value by value
    assert checksums([*values, *spans], [*(v.size for v in values), 4096]) == [*expected, expected[0]]
    for v in spans:
        v.release(manager)


def test_values_of_many_pieces_keep_their_arrays_and_hash_the_same(manager: BufferManager) -> None:
    """Values of several pieces given as flat arrays (a paged cache's) keep uint64 array columns (no
    round trip through Python ints); their digests, whole or cut short, are those of their bytes."""
    array = np.frombuffer(np.random.default_rng(2).bytes(4 * 4096), dtype=np.uint8).reshape(4, 4096)
    manager.register(array)
    rows = [array[r].ctypes.data for r in range(4)]
    addrs = np.array([rows[0], rows[2], rows[1], rows[3], rows[3] + 100], np.uint64)
    lengths = np.array([4096, 10, 4096, 50, 7], np.uint64)
    values = manager.piece_values(addrs, lengths, [2, 1, 2], writable=False)
    assert all(isinstance(v, RawPieces) and isinstance(v.addrs, np.ndarray) for v in values)
    assert [v.size for v in values] == [4106, 4096, 57]
    whole = [
        _digest(array[0], array[2, :10]),
        _digest(array[1]),
        _digest(array[3, :50], array[3, 100:107]),
    ]
    assert checksums(values, [v.size for v in values]) == whole
    assert checksums(values, [4100, 1, 52]) == [
        _digest(array[0], array[2, :4]),
        _digest(array[1, :1]),
        _digest(array[3, :50], array[3, 100:102]),
    ]


def _digest(*parts: np.ndarray) -> int:
    return xxhash.xxh3_64_intdigest(b"".join(p.tobytes() for p in parts))
