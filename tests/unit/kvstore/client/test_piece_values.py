"""A batch of multi-piece values given as flat arrays (Store.batch_get_into_pieces / batch_put_from_pieces,
as the vLLM connector passes a paged cache) stays those arrays (kvstore.client.buffers.PieceValues): each
value, made only when asked for, is the RawPieces it always was; a slice of consecutive values is the
arrays' range; and the usual read hands the engine the caller's arrays with no step per value."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from kvstore.client import read_plan
from kvstore.client.buffers import BufferManager, PieceValues, RawPieces, ints
from kvstore.errors import InvalidArgumentError
from kvstore.rpc.records import MEMORY, Location, ObjectLocation
from transfer_engine import TransferEngine


@pytest.fixture
def manager() -> Iterator[BufferManager]:
    with TransferEngine(transport="local") as engine:
        yield BufferManager(engine, 1 << 20)


def batch(manager: BufferManager, counts: list[int], writable: bool = True) -> tuple[PieceValues, list]:
    """Values of counts[i] scattered 64-byte pieces of one registered array, and each value's
    (addresses, lengths) as lists."""
    array = np.zeros(1 << 16, dtype=np.uint8)
    manager.register(array)
    base = array.ctypes.data
    rng = np.random.default_rng(len(counts))
    offsets = rng.permutation(1 << 10)[: sum(counts)] * 64
    addrs = (base + offsets).tolist()
    lengths = rng.integers(1, 65, sum(counts)).tolist()
    values = manager.piece_values(addrs, lengths, counts, writable=writable)
    assert isinstance(values, PieceValues)
    expected, at = [], 0
    for count in counts:
        expected.append((addrs[at : at + count], lengths[at : at + count]))
        at += count
    return values, expected


def test_each_value_is_its_pieces(manager: BufferManager) -> None:
    values, expected = batch(manager, [3, 1, 5, 2, 4])
    assert len(values) == 5
    for value, (addrs, lengths) in zip(values, expected, strict=True):
        assert isinstance(value, RawPieces)
        assert (ints(value.addrs), ints(value.lengths), value.size) == (addrs, lengths, sum(lengths))
    assert values[-1] is values[4]  # (made once)
    assert values.sizes == [sum(n) for _, n in expected]
    with pytest.raises(IndexError):
        values[5]


@pytest.mark.parametrize("first, stop", [(0, 5), (1, 4), (2, 3), (3, 3), (4, 9), (-3, -1)])
def test_a_slice_is_the_same_values(manager: BufferManager, first: int, stop: int) -> None:
    values, expected = batch(manager, [3, 1, 5, 2, 4])
    part = values[first:stop]
    assert isinstance(part, PieceValues)
    want = expected[first:stop]
    assert [(ints(v.addrs), ints(v.lengths)) for v in part] == want
    assert part.sizes == [sum(n) for _, n in want]
    assert int(part.counts.sum()) == part.addrs.size == part.lengths.size
    with pytest.raises(InvalidArgumentError):
        values[::2]


def test_the_usual_read_hands_the_engine_the_callers_arrays(manager: BufferManager) -> None:
    """read_plan.plan of a PieceValues batch (every key at one served location, each value its
    object's size) takes its columns as they are; a value cut short goes to the general path."""
    values, _ = batch(manager, [3, 1, 5, 2])
    here = Location(MEMORY, "host", "engine-a", 7, 0, 1, 2)
    found = [
        ObjectLocation(size, 99, [here._replace(offset=4096 * i)]) for i, size in enumerate(values.sizes)
    ]

    class Peer:
        handle = 5

    planned = read_plan.plan(found, values, lambda name: Peer(), set())
    assert planned is not None and planned.pieces is not None
    counts, addrs, lengths = planned.pieces
    assert addrs is values.addrs and lengths is values.lengths and counts is values.counts
    assert planned.local == [0] * 4 and planned.offsets == [0, 4096, 8192, 12288]
    shorter = [entry._replace(size=entry.size - 1) for entry in found]
    assert read_plan.plan(shorter, values, lambda name: Peer(), set()) is None
