"""The store with GPU buffers: every entry point (batch put/get, multi-buffer, registered raw pieces,
the Mooncake-compatible layer) moves device memory through page-locked staging, and a read that fails
its checksum never writes the GPU.

Without a GPU (CI) the refusals are what runs: a clear NotSupportedError and nothing stored."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from kvstore import Store
from kvstore.client.store import MISS
from kvstore.errors import InvalidArgumentError, NotSupportedError
from kvstore.node import StorageNode
from transfer_engine import cuda


class ArrayInterface:
    """An object speaking the CUDA array interface (what cupy, torch and numba expose)."""

    def __init__(self, ptr: int, nbytes: int, read_only: bool = False) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, read_only),
            "version": 3,
            "strides": None,
        }


def _corrupt(store: Store, location: tuple) -> None:
    """Overwrites 16 bytes of a replica in the embedded node's segment, as a memory fault would (no peer
    can: a node admits each allocation's bytes written once)."""
    (node,) = [role for role in store._roles if isinstance(role, StorageNode)]
    assert node.segment.array is not None
    offset = location[4]
    node.segment.array[offset + 100 : offset + 116] = 0xEE


@pytest.fixture
def store() -> Iterator[Store]:
    with Store.embedded(segment_size="64MiB", buffer_size=1 << 20) as s:
        yield s


@pytest.mark.skipif(cuda.available(), reason="a GPU is present: the gpu tests below cover it")
def test_without_a_gpu_gpu_buffers_are_refused_and_nothing_is_stored(store: Store) -> None:
    for buffer in (cuda.GpuBuffer(1 << 40, 4096, 0), ArrayInterface(1 << 40, 4096)):
        with pytest.raises(NotSupportedError, match=r"libcuda|CUDA|GPU"):
            store.put_from("k", buffer)
        with pytest.raises(NotSupportedError, match=r"libcuda|CUDA|GPU"):
            store.batch_get_into(["k"], [buffer])
        with pytest.raises(NotSupportedError, match=r"libcuda|CUDA|GPU"):
            store.register_buffer(buffer)
    assert not store.exists("k")
    with pytest.raises(InvalidArgumentError, match="all host memory or all GPU"):
        store.batch_put_from_multi_buffers(["k"], [[np.zeros(16, np.uint8), ArrayInterface(1 << 40, 16)]])
    store.put("k", b"host bytes still move")  # nothing leaked: the host path is untouched
    assert store.get("k") == b"host bytes still move"


def _device_bytes(memory: cuda.DeviceMemory, offset: int, size: int) -> np.ndarray:
    out = np.empty(size, np.uint8)
    cuda.copy_to_host(memory.device, [memory.ptr + offset], [out.ctypes.data], [size])
    return out


def _fill(memory: cuda.DeviceMemory, data: np.ndarray, offset: int = 0) -> None:
    cuda.copy_to_device(memory.device, [memory.ptr + offset], [data.ctypes.data], [data.nbytes])


@pytest.mark.gpu
def test_gpu_values_round_trip_through_every_entry_point(store: Store) -> None:
    rng = np.random.default_rng(7)
    size = 3 << 20  # larger than the 1 MiB staging area: those values take pageable blocks for the call
    data = rng.integers(0, 256, 4 * size, dtype=np.uint8)
    with cuda.DeviceMemory(4 * size) as src, cuda.DeviceMemory(4 * size) as dst:
        _fill(src, data)
        keys = [f"gpu-{i}" for i in range(4)]
        assert all(
            r.code == 0
            for r in store.batch_put_detailed(keys, [[src.buffer.piece(i * size, size)] for i in range(4)])
        )
        got = store.batch_get_into(keys, [ArrayInterface(dst.ptr + i * size, size) for i in range(4)])
        assert got == [size] * 4 and np.array_equal(_device_bytes(dst, 0, 4 * size), data)
        assert store.get(keys[1]) == data[size : 2 * size].tobytes()  # what was stored is the GPU's bytes

        # Small values in two pieces each, from raw pieces of a registered GPU allocation.
        store.register_buffer(dst.buffer)
        half = 2048
        lists = [[(dst.ptr + i * 2 * half, half), (dst.ptr + (i * 2 + 1) * half, half)] for i in range(8)]
        store.batch_put_from_multi_buffers([f"small-{i}" for i in range(8)], lists)
        assert store.get("small-3") == data[6 * half : 8 * half].tobytes()
        store.unregister_buffer(dst.buffer)


@pytest.mark.gpu
def test_a_corrupt_or_missing_value_never_writes_the_gpu(store: Store) -> None:
    payload = np.full(1 << 16, 0x5A, np.uint8)
    store.put("one", payload.tobytes())
    _corrupt(store, store.locate(["one"])[0].locations[0])
    with cuda.DeviceMemory(1 << 16) as dst:
        marker = np.full(1 << 16, 0x11, np.uint8)
        _fill(dst, marker)
        assert store.batch_get_into(["one", "absent"], [dst.buffer, dst.buffer]) == [MISS, MISS]
        assert np.array_equal(_device_bytes(dst, 0, 1 << 16), marker)
        with pytest.raises(InvalidArgumentError, match="read-only"):
            store.batch_get_into(["one"], [ArrayInterface(dst.ptr, 1 << 16, read_only=True)])


@pytest.mark.gpu
def test_the_mooncake_layer_takes_device_pointers(store: Store) -> None:
    from kvstore.integrations.mooncake import MooncakeDistributedStore

    mc = MooncakeDistributedStore()
    mc._store = store  # the layer over an existing client (setup() would connect a new one)
    data = np.arange(1 << 20, dtype=np.uint32).view(np.uint8)[: 1 << 20]
    with cuda.DeviceMemory(2 << 20) as memory:
        _fill(memory, data)
        assert mc.register_buffer(memory.ptr, 2 << 20) == 0
        assert mc.batch_put_from(["m"], [memory.ptr], [1 << 20]) == [0]
        assert mc.batch_get_into(["m"], [memory.ptr + (1 << 20)], [1 << 20]) == [1 << 20]
        assert np.array_equal(_device_bytes(memory, 1 << 20, 1 << 20), data)
        assert mc.unregister_buffer(memory.ptr) == 0


@pytest.mark.gpu
def test_a_paged_kv_cache_in_gpu_memory_saves_and_loads_blocks(store: Store) -> None:
    """The connectors' data path (PagedCache + BlockMover) over two layers of device memory, blocks
    strided as vLLM lays them out: every block saved, the cache wiped, every block loaded back."""
    from kvstore.integrations.paged import Batch, BlockMover, LayerGeometry, PagedCache, StoreLink

    blocks, block_bytes = 16, 32 << 10
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 2 * blocks * block_bytes, dtype=np.uint8)
    with cuda.DeviceMemory(2 * blocks * block_bytes) as memory:
        _fill(memory, data)
        layers = [  # two layers interleaved in one allocation: stride 2 blocks
            LayerGeometry(
                f"layer{i}",
                memory.ptr + i * block_bytes,
                2 * block_bytes,
                block_bytes,
                blocks,
                (memory.ptr, memory.nbytes),
            )
            for i in range(2)
        ]
        cache = PagedCache(layers)
        cache.register(store)
        mover = BlockMover(StoreLink.wrapping(store))
        batch = Batch()
        for key, buffers in zip(
            [f"block-{b}" for b in range(blocks)],
            cache.many_buffers([[b, b] for b in range(blocks)]),
            strict=True,
        ):
            batch.add(key, buffers)
        assert mover.save(batch).result(timeout=30) == [True] * blocks
        _fill(memory, np.zeros_like(data))
        assert mover.load(batch).result(timeout=30) == [True] * blocks
        assert np.array_equal(_device_bytes(memory, 0, memory.nbytes), data)
        cache.unregister(store)


@pytest.mark.gpu
def test_torch_cuda_layers_are_taken_by_the_connectors() -> None:
    torch = pytest.importorskip("torch")
    from kvstore.integrations.paged import layer_geometry

    kv = torch.zeros((8, 2, 4, 16, 64), dtype=torch.float16, device="cuda")  # vLLM: [blocks, K|V, ...]
    geometry = layer_geometry("layer0", kv)
    assert geometry.base == kv.data_ptr() and geometry.num_blocks == 8
    assert geometry.block_bytes == geometry.block_stride == kv[0].numel() * 2
    assert geometry.storage == (kv.untyped_storage().data_ptr(), kv.untyped_storage().nbytes())


@pytest.mark.gpu
def test_batches_larger_than_a_pipeline_chunk_move_in_overlapped_chunks() -> None:
    """Chunks of 1 MiB over a 24-value batch: chunk k+1 is copied while chunk k is sent (put), chunk k
    copied while chunk k+1 is read (get); misses and a corrupt value in a middle chunk stay misses."""
    rng = np.random.default_rng(11)
    size, n = 384 << 10, 24
    data = rng.integers(0, 256, n * size, dtype=np.uint8)
    with (
        Store.embedded(segment_size="64MiB", buffer_size=16 << 20, gpu_pipeline_chunk=1 << 20) as store,
        cuda.DeviceMemory(n * size) as src,
        cuda.DeviceMemory(n * size) as dst,
    ):
        assert store.buffers.pipeline.chunk_bytes == 1 << 20  # 9 MiB of values: 9 chunks
        _fill(src, data)
        keys = [f"chunked-{i}" for i in range(n)]
        assert store.batch_put_from(keys, [src.buffer.piece(i * size, size) for i in range(n)]) == [0] * n
        assert all(store.get(k) == data[i * size : (i + 1) * size].tobytes() for i, k in enumerate(keys))
        _corrupt(store, store.locate([keys[13]])[0].locations[0])
        marker = np.full(n * size, 0x11, np.uint8)
        _fill(dst, marker)
        wanted = [*keys[:5], "absent", *keys[6:]]
        got = store.batch_get_into(wanted, [dst.buffer.piece(i * size, size) for i in range(n)])
        assert got == [size] * 5 + [MISS] + [size] * 7 + [MISS] + [size] * 10
        back = _device_bytes(dst, 0, n * size)
        for i in range(n):
            expect = marker if i in (5, 13) else data
            assert np.array_equal(back[i * size : (i + 1) * size], expect[i * size : (i + 1) * size]), i
