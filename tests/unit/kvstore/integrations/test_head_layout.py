"""The canonical head-slice layout (kvstore.integrations.head_layout): a model's KV blocks laid out as vLLM
0.32 lays them out for each TP rank (one int8 allocation per rank, per-layer [B, H, N, C] views whose
strides follow a KVCacheLayout permutation, heads sharded as QKVParallelLinear shards them) give the same
member bytes at every TP size, and each rank's pieces touch only its own heads."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from kvstore.errors import InvalidArgumentError, NotSupportedError
from kvstore.integrations.head_layout import HeadLayout, HeadSplit, coalesce, layer_view
from kvstore.integrations.paged import Pieces

# vLLM's KVCacheLayout: stride permutations of the logical [L, B, H, N, C] axes (vllm/v1/kv_cache_layout.py)
LAYOUTS = {
    "LBHNC": (0, 1, 2, 3, 4),  # CPU backend, FlashInfer HND
    "LBNHC": (0, 1, 3, 2, 4),  # flash-attn, FlashInfer NHD
    "LHBNC": (0, 2, 1, 3, 4),
    "BLHNC": (1, 0, 2, 3, 4),
    "BLNHC": (1, 0, 3, 2, 4),
    "BHLNC": (1, 2, 0, 3, 4),
}
LAYERS, BLOCKS, TOKENS, CONTENT = 3, 6, 4, 8  # CONTENT: K|V values of one token and head (float16)


def model(heads: int, seed: int = 0) -> list[np.ndarray]:
    """A model's KV cache at TP=1, as logical [B, H, N, C] float16 per layer, of random bytes."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (LAYERS, BLOCKS, heads, TOKENS, CONTENT * 2), dtype=np.uint8)
    return [raw[i].view(np.float16) for i in range(LAYERS)]


def allocate(layout: str, heads: int, blocks: int = BLOCKS) -> tuple:
    """One rank's allocation as vLLM makes it (compute_layout_strides): a flat byte buffer and one
    [B, H, N, C] view per layer."""
    order = LAYOUTS[layout]
    shape = (LAYERS, blocks, heads, TOKENS, CONTENT * 2)
    strides = [0] * 5
    step = 1
    for dim in reversed(order):
        strides[dim] = step
        step *= shape[dim]
    buf = np.zeros(step, dtype=np.uint8)
    view = as_strided(buf, shape, strides)
    return buf, [view[i].view(np.float16) for i in range(LAYERS)]


def rank_heads(heads: int, rank: int, tp: int) -> list[int]:
    """The KV heads vLLM gives TP rank `rank` (QKVParallelLinear: replicated when tp > heads)."""
    if tp > heads:
        return [rank // (tp // heads)]
    per = heads // tp
    return list(range(rank * per, (rank + 1) * per))


def rank_cache(full: list[np.ndarray], layout: str, rank: int, tp: int) -> tuple:
    heads = rank_heads(full[0].shape[1], rank, tp)
    buf, views = allocate(layout, len(heads))
    for view, layer in zip(views, full, strict=True):
        view[...] = layer[:, heads]
    return buf, views


def member_bytes(full: list[np.ndarray], rows: np.ndarray, member: int, split: int) -> bytes:
    """What the canonical order says member `member` of a block is: per layer, its heads' [N, C]."""
    per = full[0].shape[1] // split
    heads = slice(member * per, (member + 1) * per)
    return b"".join(np.ascontiguousarray(full[i][rows[i], heads]).tobytes() for i in range(len(full)))


def objects(pieces: Pieces) -> list[list[tuple[int, int]]]:
    """Each object's (address, size) pieces."""
    ends = np.cumsum(pieces.counts).tolist()
    spans = list(zip(pieces.addrs.tolist(), pieces.lengths.tolist(), strict=True))
    return [spans[end - count : end] for end, count in zip(ends, pieces.counts.tolist(), strict=True)]


def gather(buf: np.ndarray, pieces: Pieces) -> list[bytes]:
    """Each object's bytes from its pieces (which must lie in the rank's one allocation)."""
    base = buf.__array_interface__["data"][0]
    out = []
    for spans in objects(pieces):
        for addr, size in spans:
            assert base <= addr and addr + size <= base + buf.nbytes, "a piece outside the rank's allocation"
        out.append(b"".join(buf[addr - base : addr - base + size].tobytes() for addr, size in spans))
    return out


def rows_for(n: int, seed: int = 1) -> np.ndarray:
    """n objects' block ids, a different block per layer (as hybrid groups place one token range)."""
    return np.random.default_rng(seed).integers(0, BLOCKS, (n, LAYERS))


def stored_by(full: list[np.ndarray], layout: str, tp: int, split: int, rows: np.ndarray) -> dict:
    """{(object row, member): bytes} written by every writing rank of a TP group."""
    stored: dict[tuple[int, int], bytes] = {}
    for rank in range(tp):
        buf, views = rank_cache(full, layout, rank, tp)
        cache = HeadLayout(
            [layer_view(f"l{i}", v) for i, v in enumerate(views)],
            HeadSplit.plan(full[0].shape[1], rank, tp, split),
        )
        if not cache.writes:
            continue
        pieces, members = cache.rank_pieces(rows)
        rows_of = np.repeat(np.arange(len(rows)), len(cache.members))
        for row, member, data in zip(rows_of.tolist(), members.tolist(), gather(buf, pieces), strict=True):
            assert (row, member) not in stored, "two writers of one member"
            stored[(row, member)] = data
    return stored


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_members_written_at_tp2_are_the_bytes_tp1_and_tp4_read(layout: str) -> None:
    full = model(heads=4)
    rows = rows_for(5)
    written = stored_by(full, layout, tp=2, split=4, rows=rows)
    assert sorted(written) == [(r, s) for r in range(5) for s in range(4)]
    for key, data in written.items():
        assert data == member_bytes(full, rows[key[0]], key[1], 4)
    for tp in (1, 4):
        assert stored_by(full, layout, tp, split=4, rows=rows) == written
    # A coarser split (2 members of 2 heads) is read by TP=1 and TP=2 alike.
    coarse = stored_by(full, layout, tp=2, split=2, rows=rows)
    assert coarse == stored_by(full, "LBHNC", tp=1, split=2, rows=rows)
    for (row, member), data in coarse.items():
        assert data == member_bytes(full, rows[row], member, 2)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_rank_reads_into_its_own_heads_only(layout: str, tp: int) -> None:
    """Reading members into a rank's cache (the stored bytes, scattered by the pieces) fills exactly the
    rank's heads of the rows' blocks with the model's values and leaves every other byte alone."""
    full, rows = model(heads=4, seed=3), rows_for(4, seed=2)
    written = stored_by(full, layout, 4, 4, rows)
    for rank in range(tp):
        buf, views = allocate(layout, len(rank_heads(4, rank, tp)))
        buf[...] = 0xA5  # canary
        cache = HeadLayout([layer_view(f"l{i}", v) for i, v in enumerate(views)], HeadSplit.plan(4, rank, tp))
        pieces, members = cache.rank_pieces(rows)
        assert int(pieces.lengths.sum()) == len(rows) * len(cache.members) * cache.member_bytes
        assert cache.member_bytes * 4 * len(rows) == sum(len(v) for v in written.values())
        base = buf.__array_interface__["data"][0]
        owners = np.repeat(np.arange(len(rows)), len(cache.members)).tolist()
        for spans, row, member in zip(objects(pieces), owners, members.tolist(), strict=True):
            data, used = written[(row, member)], 0
            for addr, size in spans:
                buf[addr - base : addr - base + size] = np.frombuffer(data[used : used + size], np.uint8)
                used += size
            assert used == len(data)
        expected, _ = rank_cache(full, layout, rank, tp)
        marked, marks = allocate(layout, len(rank_heads(4, rank, tp)))
        for i, mark in enumerate(marks):  # the rows' blocks, this rank's heads: all it may touch
            mark.view(np.uint8)[np.unique(rows[:, i])] = 1
        touched = marked == 1
        assert np.array_equal(buf[touched], expected[touched])
        assert (buf[~touched] == 0xA5).all()


@pytest.mark.parametrize(
    ("layout", "split", "tp", "pieces_per_member"),
    [
        ("LBHNC", 4, 2, LAYERS),  # CPU / HND: a member of one layer is one run
        ("LBHNC", 1, 1, LAYERS),  # the whole block of a layer
        ("LBNHC", 4, 1, LAYERS * TOKENS),  # NHD: a token of a head per run
        ("LBNHC", 1, 1, LAYERS * 4 * TOKENS),  # head-major canonical order: a run per (head, token)
        ("BHLNC", 4, 4, 1),  # a head's layers are adjacent: one run across layers
    ],
)
def test_adjacent_pieces_are_merged(layout: str, split: int, tp: int, pieces_per_member: int) -> None:
    _, views = allocate(layout, 4 // tp)
    cache = HeadLayout([layer_view(f"l{i}", v) for i, v in enumerate(views)], HeadSplit.plan(4, 0, tp, split))
    rows = np.full((3, LAYERS), 2)  # one block in every layer
    pieces, _ = cache.rank_pieces(rows)
    assert pieces.counts.tolist() == [pieces_per_member] * (3 * len(cache.members))


def test_mla_is_one_member_every_rank_reads_and_rank_0_writes() -> None:
    full = model(heads=1, seed=5)
    rows = rows_for(3)
    for tp in (1, 2, 4):
        plans = [HeadSplit.plan(1, r, tp) for r in range(tp)]
        assert [p.writes for p in plans] == [True] + [False] * (tp - 1)
        assert all(list(p.members) == [0] and p.count == 1 for p in plans)
        assert stored_by(full, "LBNHC", tp, 1, rows) == {
            (r, 0): member_bytes(full, rows[r], 0, 1) for r in range(3)
        }
    for rank in range(4):  # and every replica reads the same member
        buf, views = rank_cache(full, "LBNHC", rank, 4)
        cache = HeadLayout([layer_view(f"l{i}", v) for i, v in enumerate(views)], HeadSplit.plan(1, rank, 4))
        assert gather(buf, cache.many_pieces(rows, [0, 0, 0])) == [
            member_bytes(full, rows[r], 0, 1) for r in range(3)
        ]


def test_gqa_replicated_heads_have_one_writer_each() -> None:
    plans = [HeadSplit.plan(2, r, 4) for r in range(4)]
    assert [list(p.members) for p in plans] == [[0], [0], [1], [1]]
    assert [p.writes for p in plans] == [True, False, True, False]
    assert {p.local_heads for p in plans} == {1}
    full, rows = model(heads=2, seed=7), rows_for(4)
    assert stored_by(full, "LBHNC", 4, 2, rows) == stored_by(full, "LBHNC", 1, 2, rows)
    buf, views = rank_cache(full, "LBHNC", 3, 4)  # a non-writing replica reads the same bytes
    cache = HeadLayout([layer_view(f"l{i}", v) for i, v in enumerate(views)], plans[3])
    assert gather(buf, cache.many_pieces(rows, [1] * 4)) == [member_bytes(full, r, 1, 2) for r in rows]


def test_splits_a_reader_cannot_read_whole_are_refused() -> None:
    with pytest.raises(NotSupportedError, match="partial members"):
        HeadSplit.plan(8, 0, 4, split=2)  # 4 heads a member, 2 heads a rank
    with pytest.raises(NotSupportedError, match="one head per member"):
        HeadSplit.plan(2, 0, 4, split=1)  # replicated single heads under a 2-head member
    for heads, rank, tp, split in ((4, 0, 2, 3), (4, 0, 3, 4), (2, 0, 5, 2), (4, 2, 2, 4), (0, 0, 1, 1)):
        with pytest.raises(InvalidArgumentError):
            HeadSplit.plan(heads, rank, tp, split)


def test_bad_inputs_are_refused_with_clear_errors() -> None:
    _, views = allocate("LBHNC", 2)
    layers = [layer_view(f"l{i}", v) for i, v in enumerate(views)]
    with pytest.raises(InvalidArgumentError, match="holds 2 KV heads"):
        HeadLayout(layers, HeadSplit.plan(4, 0, 1))  # a TP=1 geometry over a TP=2 rank's tensors
    cache = HeadLayout(layers, HeadSplit.plan(4, 1, 2))
    assert list(cache.members) == [2, 3]
    with pytest.raises(InvalidArgumentError, match=r"holds members 2\.\.3"):
        cache.many_pieces([[0] * LAYERS], [0])
    with pytest.raises(InvalidArgumentError, match="outside layer"):
        cache.many_pieces([[0, BLOCKS, 0]], [2])
    with pytest.raises(InvalidArgumentError, match="per layer"):
        cache.many_pieces([[0, 0]], [2])
    with pytest.raises(InvalidArgumentError, match="members for"):
        cache.many_pieces([[0] * LAYERS], [2, 3])
    with pytest.raises(InvalidArgumentError, match="axes"):
        layer_view("x", views[0], axes="BHNN")
    with pytest.raises(NotSupportedError, match="not contiguous"):
        layer_view("x", views[0][..., ::2])  # every other value of a token
    with pytest.raises(InvalidArgumentError, match="not a tensor"):
        layer_view("x", [[1, 2]])
    empty = cache.many_pieces(np.zeros((0, LAYERS), dtype=np.int64), [])
    assert len(empty.addrs) == 0 and len(empty.counts) == 0


def test_kernel_blocks_make_one_block_and_k_v_kept_apart_are_parts() -> None:
    """A backend's kernel blocks (num_blocks * 2 rows) and an older [2, B, N, H, D] layout: members are
    still the same bytes whichever TP size holds them."""
    rng = np.random.default_rng(11)
    full = rng.integers(0, 256, (2, 4, 2 * TOKENS, 4, 6), dtype=np.uint8)  # [K|V, B, N, H, D]: TP=1
    rows = np.array([[3], [0], [2]])

    def members_of(tp: int) -> dict:
        out = {}
        for rank in range(tp):
            heads = rank_heads(4, rank, tp)
            # The rank's tensor in kernel blocks of TOKENS tokens: [2, 2 * B, TOKENS, H, D].
            mine = np.ascontiguousarray(full[:, :, :, heads]).reshape(2, 8, TOKENS, len(heads), 6)
            cache = HeadLayout(
                [layer_view("l", mine, axes="KBNHC", num_blocks=4)], HeadSplit.plan(4, rank, tp)
            )
            pieces, members = cache.rank_pieces(rows)
            owner = np.repeat(np.arange(3), len(cache.members))
            found = gather(mine.reshape(-1), pieces)
            out.update(zip(zip(owner.tolist(), members.tolist(), strict=True), found, strict=True))
        return out

    at_one = members_of(1)
    assert at_one == members_of(2) == members_of(4)
    for (row, member), data in at_one.items():  # per K|V part, the head's tokens of the whole block
        block = full[:, rows[row][0], :, member]
        assert data == np.ascontiguousarray(block).tobytes()


def test_coalesce_never_merges_across_objects() -> None:
    pieces = Pieces(
        np.array([100, 110, 120, 130, 500], dtype=np.uint64),
        np.array([10, 10, 10, 5, 1], dtype=np.uint64),
        np.array([2, 0, 2, 1], dtype=np.int64),
    )
    merged = coalesce(pieces)
    assert merged.addrs.tolist() == [100, 120, 500]
    assert merged.lengths.tolist() == [20, 15, 1]
    assert merged.counts.tolist() == [1, 0, 1, 1]


def test_thousands_of_rows_are_one_array_pass() -> None:
    _, views = allocate("LBNHC", 2, blocks=64)
    cache = HeadLayout([layer_view(f"l{i}", v) for i, v in enumerate(views)], HeadSplit.plan(4, 0, 2))
    rows = np.random.default_rng(0).integers(0, 64, (4096, LAYERS))
    pieces, members = cache.rank_pieces(rows)
    assert len(members) == 8192 and pieces.counts.sum() == len(pieces.addrs) == 8192 * LAYERS * TOKENS


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_blocks_with_one_id_in_every_layer_give_the_pieces_of_their_rows(layout: str, tp: int) -> None:
    """rank_block_pieces (one block table for the group, as vLLM keeps) = rank_pieces of rows that repeat
    the id in every layer, adjacent layers merged alike; an id outside the layers is refused."""
    ids = np.random.default_rng(4).integers(0, BLOCKS, 9)
    for rank in range(tp):
        _, views = allocate(layout, len(rank_heads(4, rank, tp)))
        cache = HeadLayout([layer_view(f"l{i}", v) for i, v in enumerate(views)], HeadSplit.plan(4, rank, tp))
        fast = cache.rank_block_pieces(ids)
        rows = np.repeat(ids[:, None], len(views), axis=1)
        assert objects(fast) == objects(cache.rank_pieces(rows)[0])
        assert objects(cache.rank_block_pieces([])) == []
        for bad in (-1, BLOCKS):
            with pytest.raises(InvalidArgumentError, match=f"block {bad} outside"):
                cache.rank_block_pieces([0, bad])
