"""How a batch of GPU values is cut for the staging pipeline (the copies themselves are gpu tests in
tests/integration/kvstore/test_gpu_store.py)."""

from __future__ import annotations

from kvstore.client.buffers import RawPieces
from kvstore.client.gpu_buffers import GpuStaged
from kvstore.client.gpu_pipeline import StagingPipeline


def gpu(size: int) -> GpuStaged:
    return GpuStaged([0], [1 << 40], [size], size)


def test_batches_within_one_chunk_move_whole() -> None:
    pipeline = StagingPipeline(None, 8 << 20)  # type: ignore[arg-type]  # cutting never touches the GPU
    assert pipeline.chunks([gpu(1 << 20)] * 8) == [(0, 8)]
    assert pipeline.chunks([]) == [(0, 0)]
    assert StagingPipeline(None, 0).chunks([gpu(64 << 20)] * 4) == [(0, 4)]  # type: ignore[arg-type]


def test_chunks_hold_about_chunk_bytes_of_gpu_values() -> None:
    pipeline = StagingPipeline(None, 4 << 20)  # type: ignore[arg-type]
    assert pipeline.chunks([gpu(1 << 20)] * 10) == [(0, 4), (4, 8), (8, 10)]
    assert pipeline.chunks([gpu(9 << 20), gpu(1 << 20), gpu(1 << 20)]) == [(0, 1), (1, 3)]
    host = RawPieces([1 << 30], [8 << 20], 8 << 20)  # host values weigh nothing: their bytes need no copy
    assert pipeline.chunks([host, gpu(3 << 20), host, gpu(3 << 20), host]) == [(0, 4), (4, 5)]
