"""How a batch of GPU values is cut for the staging pipeline (the copies themselves are gpu tests in
tests/integration/kvstore/test_gpu_store.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from kvstore.client.buffers import RawPieces
from kvstore.client.gpu_buffers import GpuMemory, GpuStaged
from kvstore.client.gpu_pipeline import StagingPipeline
from transfer_engine import TransferEngine


def gpu(size: int) -> GpuStaged:
    return GpuStaged([0], [1 << 40], [size], size)


@pytest.fixture
def pipeline() -> Iterator[Callable[[int], StagingPipeline]]:
    """Pipelines of a client that has staged GPU values (its staging exists; cutting touches no GPU)."""
    with TransferEngine() as engine:
        memory = GpuMemory(engine, 1 << 20)
        memory.staging.release(memory.staging.scratch(4096))
        yield lambda chunk: StagingPipeline(memory, chunk)


def test_a_host_only_client_never_cuts() -> None:
    with TransferEngine() as engine:
        host_only = StagingPipeline(GpuMemory(engine, 1 << 20), 1 << 20)
        assert host_only.chunks([gpu(1 << 20)] * 8) == [(0, 8)]  # no staging yet: no GPU values to cut


def test_batches_within_one_chunk_move_whole(pipeline: Callable[[int], StagingPipeline]) -> None:
    assert pipeline(8 << 20).chunks([gpu(1 << 20)] * 8) == [(0, 8)]
    assert pipeline(8 << 20).chunks([]) == [(0, 0)]
    assert pipeline(0).chunks([gpu(64 << 20)] * 4) == [(0, 4)]


def test_chunks_hold_about_chunk_bytes_of_gpu_values(pipeline: Callable[[int], StagingPipeline]) -> None:
    cut = pipeline(4 << 20)
    assert cut.chunks([gpu(1 << 20)] * 10) == [(0, 4), (4, 8), (8, 10)]
    assert cut.chunks([gpu(9 << 20), gpu(1 << 20), gpu(1 << 20)]) == [(0, 1), (1, 3)]
    host = RawPieces([1 << 30], [8 << 20], 8 << 20)  # host values weigh nothing: their bytes need no copy
    assert cut.chunks([host, gpu(3 << 20), host, gpu(3 << 20), host]) == [(0, 4), (4, 5)]
