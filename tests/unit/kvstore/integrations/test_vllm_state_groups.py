"""Mamba / linear-attention state groups as the vLLM connector stores them (kvstore.integrations.vllm_groups
STATE, kvstore.integrations.vllm_state; no vLLM needed: the engines tier checks the rule against vLLM's own
MambaManager and the whole path with vLLM's real Scheduler and vllm.LLM)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kvstore.errors import NotSupportedError
from kvstore.integrations.head_layout import HeadLayout, HeadSplit, layer_view
from kvstore.integrations.vllm_groups import FULL, STATE, GroupRule, longest_hit
from kvstore.integrations.vllm_state import checkpointed_blocks, state_heads, state_suffix, state_view

BS = 32
BLOCKS, STATE_BYTES = 8, 96


def test_a_state_hit_needs_the_state_of_its_last_block_only() -> None:
    rule = GroupRule(STATE, BS)
    assert rule.skipped_tokens(384) == 383 and rule.needed(12) == range(11, 12)
    assert rule.holds_state and not rule.reads_every_block
    full = GroupRule(FULL, BS)
    # Full attention holds blocks 0..9; states exist at blocks 3 and 7 (and 9's is missing): the hit is 8.
    states = [i in (3, 7) for i in range(10)]
    assert longest_hit([full, rule], [[True] * 10, states], 0) == 8
    # Full attention reaches block 3 (state there: 4) or block 2 only (no state below: no hit).
    assert longest_hit([full, rule], [[True] * 4 + [False] * 6, states], 0) == 4
    assert longest_hit([full, rule], [[True] * 3 + [False] * 7, states], 0) == 0
    assert longest_hit([full, rule], [[True] * 4, [False] * 4], 2) == 2


def test_only_offers_on_a_whole_block_boundary_of_a_prompt_block_past_the_hit_are_saved() -> None:
    offers = [(1, 11, 64), (1, 12, 96), (1, 13, 100), (0, 14, 128), (1, 0, 160), (1, 15, 192), (1, 16, 224)]
    # group 0 is not a state group, 100 is a partial tail, block id 0 is vLLM's null block, boundary 224 is
    # past the prompt's 6 blocks, 64 is within the hit (2 blocks)
    assert checkpointed_blocks(offers, {1}, BS, 2, 6) == [(2, 1, 12), (5, 1, 15)]


def test_a_sharded_state_is_one_member_per_rank_and_its_key_names_the_tp_size() -> None:
    sharded = SimpleNamespace(shapes=((3, 8), (2, 4, 4)), dtypes=("float32", "float32"), tp_replicated=False)
    replicated = SimpleNamespace(shapes=((3, 8),), dtypes=("float32",), tp_replicated=True)
    assert state_heads(sharded, 4) == 4 and state_heads(replicated, 4) == 1
    assert state_suffix(sharded, 2).startswith("/tp2-") and state_suffix(sharded, 4).startswith("/tp4-")
    wider = SimpleNamespace(shapes=((3, 16), (2, 4, 4)), dtypes=("float32", "float32"), tp_replicated=False)
    assert state_suffix(wider, 2) != state_suffix(sharded, 2)  # another per-rank layout: another key
    assert state_suffix(replicated, 2) == state_suffix(replicated, 8)  # the same bytes at every TP size
    for rank in range(4):
        split = HeadSplit.plan(state_heads(sharded, 4), rank, 4, state_heads(sharded, 4))
        assert list(split.members) == [rank] and split.writes
        whole = HeadSplit.plan(1, rank, 4, 1)
        assert list(whole.members) == [0] and whole.writes == (rank == 0)


def test_a_state_member_is_the_blocks_state_bytes_of_every_layer_in_order() -> None:
    """vLLM hands a state layer as [blocks, H, N, state bytes] (int8); with H = 2 the member still holds
    the rank's whole state of the block: both rows, layer after layer, nothing of another block."""
    layers = [np.arange(BLOCKS * 2 * 1 * STATE_BYTES, dtype=np.int64).astype(np.int8) for _ in range(2)]
    layers = [(a + i).reshape(BLOCKS, 2, 1, STATE_BYTES) for i, a in enumerate(layers)]
    views = [state_view(layer_view(f"l{i}", a)) for i, a in enumerate(layers)]
    split = HeadSplit.plan(2, 1, 2, 2)  # TP rank 1 of 2: member 1
    layout = HeadLayout(views, split)
    pieces, members = layout.rank_pieces([[5, 5]])
    assert members.tolist() == [1] and layout.member_bytes == 2 * 2 * STATE_BYTES
    got = b"".join(
        np.ctypeslib.as_array((np.ctypeslib.ctypes.c_char * int(n)).from_address(int(a))).tobytes()
        for a, n in zip(pieces.addrs, pieces.lengths, strict=True)
    )
    assert got == layers[0][5].tobytes() + layers[1][5].tobytes()


def test_a_state_layout_with_kernel_blocks_is_refused() -> None:
    array = np.zeros((BLOCKS * 2, 1, 1, STATE_BYTES), dtype=np.int8)
    with pytest.raises(NotSupportedError):
        state_view(layer_view("split", array, num_blocks=BLOCKS))
