"""Registration rules: ids and random keys, overlap, local-buffer checks, lifetime."""

from __future__ import annotations

import numpy as np
import pytest

from transfer_engine import (
    EngineClosedError,
    InvalidArgumentError,
    NotSupportedError,
    Op,
    RequestState,
    TransferEngine,
)


def test_regions_get_distinct_ids_and_random_keys(engine: TransferEngine) -> None:
    a = engine.allocate(4096)
    b = engine.allocate(4096)
    assert a.id != b.id and a.key != b.key and a.key != 0
    assert a.shareable and a.exported
    assert {r.id for r in engine.regions()} == {a.id, b.id}


def test_exported_regions_are_in_the_descriptor(engine: TransferEngine) -> None:
    public = engine.allocate(4096)
    private = engine.allocate(4096, export=False)
    with TransferEngine() as peer:
        segment = peer.open_peer(engine.name)
        ids = {r.id for r in segment.regions}
    assert public.id in ids and private.id not in ids


def test_overlap_is_rejected(engine: TransferEngine) -> None:
    buf = np.zeros(1 << 16, dtype=np.uint8)
    engine.register(buf)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        engine.register_ptr(buf.ctypes.data + 100, 10)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        engine.register_ptr(buf.ctypes.data - 10, 20)


def test_buffer_kinds(engine: TransferEngine) -> None:
    r1 = engine.register(bytearray(4096))
    r2 = engine.register(memoryview(bytearray(8192)))
    r3 = engine.register(np.zeros((16, 16), dtype=np.float32))
    assert (r1.length, r2.length, r3.length) == (4096, 8192, 1024)
    with pytest.raises(InvalidArgumentError, match="contiguous"):
        engine.register(np.zeros((16, 16), dtype=np.uint8)[:, ::2])
    with pytest.raises(InvalidArgumentError):
        engine.register(12345)
    with pytest.raises(InvalidArgumentError):
        engine.register_ptr(0, 10)


@pytest.mark.parametrize("kind", ["gpu", "cpu:x", "", "cuda", "gpu:-1", "gpu:x", "file:0"])
def test_memory_kind_validation(engine: TransferEngine, kind: str) -> None:
    with pytest.raises(InvalidArgumentError, match="memory kind"):
        engine.register_ptr(4096, 4096, kind=kind)


def test_python_buffers_are_host_memory(engine: TransferEngine) -> None:
    with pytest.raises(NotSupportedError):
        engine.register(np.zeros(4096, np.uint8), kind="gpu:0")
    region = engine.register(np.zeros(4096, np.uint8), kind="host-pinned")
    assert region.kind == "host-pinned"
    assert engine.allocate(4096).kind == "host"


def test_local_memory_must_be_registered_and_inside_one_region(engine: TransferEngine) -> None:
    remote = engine.allocate(1 << 16)
    local = engine.allocate(1 << 16, export=False)
    segment = engine.open_peer(engine.name)
    handle = engine.submit(Op.READ, [local.addr + (1 << 16) - 100], segment, remote.id, [0], 4096)
    assert handle.wait()
    assert list(handle.states()) == [RequestState.FAILED]


def test_closed_engine_refuses(engine: TransferEngine) -> None:
    e = TransferEngine()
    e.close()
    with pytest.raises(EngineClosedError):
        e.allocate(4096)
    e.close()  # idempotent


def test_unregistered_memory_can_be_registered_again(engine: TransferEngine) -> None:
    buf = np.zeros(1 << 16, dtype=np.uint8)
    region = engine.register(buf)
    engine.unregister(region)
    again = engine.register(buf)
    assert again.id != region.id


def test_allocated_view_outlives_unregister_and_close() -> None:
    """A numpy view of allocated memory keeps the mapping: using it late is stale data, not a crash."""
    engine = TransferEngine()
    region = engine.allocate(1 << 20)
    view = region.array
    assert view is not None
    view[:] = 5
    engine.unregister(region)
    engine.close()
    del region
    assert int(view.sum()) == 5 * (1 << 20)
    view[:10] = 1


def test_a_region_allocated_unpopulated_is_faulted_in_by_ranges() -> None:
    """allocate(populate=False) + prefault over disjoint ranges (what a storage node does on several
    threads); ranges outside the region, or not starting at a page, are clear errors."""
    from transfer_engine import NotFoundError

    with TransferEngine() as engine:
        size = (8 << 20) + 100  # the last range ends inside a page
        region = engine.allocate(size, populate=False)
        for at in range(0, size, 1 << 20):
            engine.prefault(region, at, min(1 << 20, size - at))
        assert region.array is not None and not region.array.any()
        region.array[-1] = 7
        with pytest.raises(InvalidArgumentError, match="outside"):
            engine.prefault(region, 4096, size)
        with pytest.raises(InvalidArgumentError, match="page"):
            engine.prefault(region, 100, 4096)
        outside = engine.register(bytearray(1 << 16))
        with pytest.raises(NotFoundError):
            engine.prefault(outside, 0, 4096)
