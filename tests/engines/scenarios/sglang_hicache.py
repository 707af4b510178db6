"""Real SGLang: its `dynamic` storage-backend factory builds kvstore's HiCache backend, which is then
driven as SGLang's cache controller drives it (batch_exists -> batch_set_v1 -> batch_get_v1, page keys
from SGLang's own page-hash function) across two "instances" sharing one kvstore (KVSTORE_MASTER).
Covers MHA (K and V per TP rank) and MLA (one writer rank, every rank reads), the zero-copy v1 interface
and the plain one. Prints JSON. Runs in the engines tier's virtual environment.

SGLang's host pools allocate through CUDA-only paths, so small pools that follow its page-buffer
contract (get_page_buffer_meta, page_first layouts, as in sglang.srt.mem_cache.pool_host) stand in.
"""

from __future__ import annotations

import json

import torch
from sglang_common import kvstore_backend, page_keys

PAGE = 16
LAYERS, HEADS, DIM = 4, 2, 32
SIZE = 64 * PAGE  # host pool tokens


class MHAPagePool:
    """MHA host pool, page_first: kv_buffer [2 (K, V), tokens, layers, heads, dim]."""

    layout = "page_first"
    page_size = PAGE

    def __init__(self) -> None:
        self.kv_buffer = torch.zeros((2, SIZE, LAYERS, HEADS, DIM), dtype=torch.bfloat16)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        item = self.kv_buffer.element_size()
        v_offset = LAYERS * SIZE * HEADS * DIM * item
        base = self.kv_buffer.data_ptr()
        ptrs = []
        for i in indices.tolist()[::PAGE]:
            k = base + i * LAYERS * HEADS * DIM * item
            ptrs += [k, k + v_offset]
        return ptrs, [LAYERS * item * PAGE * HEADS * DIM] * len(ptrs)

    def page(self, first_token: int) -> bytes:
        return b"".join(
            self.kv_buffer[kv, first_token : first_token + PAGE]
            .contiguous()
            .view(torch.uint8)
            .numpy()
            .tobytes()
            for kv in (0, 1)
        )

    def get_data_page(self, index: int) -> torch.Tensor:  # the plain interface's flat page
        return self.kv_buffer[:, index : index + PAGE].flatten()

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(2 * PAGE * LAYERS * HEADS * DIM, dtype=torch.bfloat16)


class MLAPagePool:
    """MLA host pool, page_first: kv_buffer [tokens, layers, 1, kv_cache_dim]."""

    layout = "page_first"
    page_size = PAGE

    def __init__(self) -> None:
        self.kv_buffer = torch.zeros((SIZE, LAYERS, 1, 2 * DIM), dtype=torch.bfloat16)

    def get_page_buffer_meta(self, indices: torch.Tensor) -> tuple[list[int], list[int]]:
        item = self.kv_buffer.element_size()
        base = self.kv_buffer.data_ptr()
        ptrs = [base + i * LAYERS * 2 * DIM * item for i in indices.tolist()[::PAGE]]
        return ptrs, [LAYERS * item * PAGE * 2 * DIM] * len(ptrs)

    def page(self, first_token: int) -> bytes:
        return (
            self.kv_buffer[first_token : first_token + PAGE].contiguous().view(torch.uint8).numpy().tobytes()
        )


def backend(pool: object, *, mla: bool, tp_rank: int = 0, tp_size: int = 1, v1: bool = True) -> object:
    storage = kvstore_backend(
        pool,
        namespace=f"sglang-test-{'mla' if mla else 'mha'}-{'v1' if v1 else 'plain'}",
        model_name="tiny-test-model",
        mla=mla,
        page_first=True,
        interface_v1=v1,
        tp_rank=tp_rank,
        tp_size=tp_size,
    )
    storage.register_mem_pool_host(pool)  # as SGLang's cache controller does after creating it
    return storage


def fill(pool: object, pages: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    buf = pool.kv_buffer  # type: ignore[attr-defined]
    buf.copy_(torch.randn(buf.shape, generator=gen).to(buf.dtype))


def main() -> None:
    tokens = [(i * 13 + 5) % 30000 for i in range(5 * PAGE)]
    keys = page_keys(tokens, PAGE)
    out: dict[str, object] = {"keys": len(keys), "key_len": len(keys[0])}
    indices = torch.arange(0, len(keys) * PAGE, dtype=torch.int64)

    # MHA, zero copy: instance 1 saves, instance 2 (fresh pool) finds and loads.
    pool_a, pool_b = MHAPagePool(), MHAPagePool()
    fill(pool_a, len(keys), 1)
    a, b = backend(pool_a, mla=False), backend(pool_b, mla=False)
    out["mha_type"] = type(a).__name__
    out["mha_exists_before"] = b.batch_exists(keys)
    out["mha_set"] = a.batch_set_v1(keys, indices)
    out["mha_set_again_skipped"] = (a.batch_set_v1(keys, indices), a.stats["skipped_pages"])
    out["mha_exists_after"] = b.batch_exists(keys)
    out["mha_exists_other_rank"] = backend(MHAPagePool(), mla=False, tp_rank=1, tp_size=2).batch_exists(keys)
    out["mha_get"] = b.batch_get_v1(keys, indices)
    out["mha_equal"] = all(pool_a.page(p * PAGE) == pool_b.page(p * PAGE) for p in range(len(keys)))

    # MLA: rank 0 writes, rank 1's set is a no-op, rank 1 of another instance reads.
    mla_a0, mla_b1 = MLAPagePool(), MLAPagePool()
    fill(mla_a0, len(keys), 2)
    writer = backend(mla_a0, mla=True, tp_rank=0, tp_size=2)
    other = backend(MLAPagePool(), mla=True, tp_rank=1, tp_size=2)
    reader = backend(mla_b1, mla=True, tp_rank=1, tp_size=2)
    out["mla_non_writer_set"] = other.batch_set_v1(keys[:2], indices[: 2 * PAGE])
    out["mla_exists_before"] = reader.batch_exists(keys)
    out["mla_set"] = writer.batch_set_v1(keys, indices)
    out["mla_exists_after"] = reader.batch_exists(keys)
    out["mla_get"] = reader.batch_get_v1(keys, indices)
    out["mla_equal"] = all(mla_a0.page(p * PAGE) == mla_b1.page(p * PAGE) for p in range(len(keys)))

    # The plain interface (interface_v1 off): flat pages through set/get.
    plain_a, plain_b = MHAPagePool(), MHAPagePool()
    fill(plain_a, len(keys), 3)
    pa, pb = backend(plain_a, mla=False, v1=False), backend(plain_b, mla=False, v1=False)
    out["plain_set"] = pa.batch_set(keys, [plain_a.get_data_page(p * PAGE) for p in range(len(keys))])
    got = pb.batch_get(keys, [plain_b.get_dummy_flat_data_page() for _ in keys])
    out["plain_equal"] = all(
        g is not None and torch.equal(g, plain_a.get_data_page(p * PAGE)) for p, g in enumerate(got)
    )
    out["plain_exists"] = pb.exists(keys[0])
    for storage in (a, b, writer, other, reader, pa, pb):
        storage.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
