"""vLLM's per-group rules as the connector applies them (kvstore.integrations.vllm_groups; no vLLM needed:
the engines tier checks the same rules against vLLM's own spec classes and managers)."""

from __future__ import annotations

import pytest

from kvstore.errors import InvalidArgumentError
from kvstore.integrations.vllm_groups import CHUNKED, FULL, WINDOW, GroupRule, longest_hit
from kvstore.integrations.vllm_keys import BlockNames

BS = 32


def test_full_attention_reads_every_block_of_the_hit() -> None:
    rule = GroupRule(FULL, BS)
    assert rule.needed(12) == range(0, 12) and rule.reads_every_block


def test_a_window_group_reads_the_blocks_under_the_window_of_the_hits_next_token() -> None:
    """Window 128, block 32: the next token after 12 blocks (384) sees tokens 257..383, in blocks 8..11
    (vLLM: get_num_skipped_tokens(384) = 257, ceil(127 / 32) = 4 contiguous blocks)."""
    rule = GroupRule(WINDOW, BS, 128)
    assert rule.skipped_tokens(384) == 257
    assert rule.needed(12) == range(8, 12) and not rule.reads_every_block
    assert rule.needed(3) == range(0, 3)  # a hit shorter than the window reads all of it
    assert GroupRule(WINDOW, BS, 128, extra_retained=32).needed(12) == range(7, 12)


def test_a_chunked_local_group_reads_the_blocks_of_the_current_chunk() -> None:
    rule = GroupRule(CHUNKED, BS, 128)
    assert rule.needed(12) == range(12, 12)  # 384 starts a chunk: nothing before it is read
    assert rule.needed(14) == range(12, 14)


def test_the_hit_is_the_longest_prefix_every_group_can_load() -> None:
    full, window = GroupRule(FULL, BS), GroupRule(WINDOW, BS, 128)
    # The store has blocks 0..13 of the full group; the window group lost blocks 0..7 (never needed at
    # 12) and block 13.
    full_row = [True] * 14
    window_row = [False] * 8 + [True] * 5 + [False]
    assert longest_hit([full, window], [full_row, window_row], 0) == 13
    # Full attention missing block 5: nothing past it counts, whatever the window group holds.
    assert longest_hit([full, window], [[i != 5 for i in range(14)], [True] * 14], 0) == 5
    # Window blocks 8..11 missing: a hit of 12 or 13 is not servable; 8 is (it reads 4..7).
    window_gap = [i not in (8, 9, 10, 11) for i in range(14)]
    assert longest_hit([full, window], [full_row, window_gap], 0) == 8
    # Only a window group: a run of 4 blocks anywhere under the hit's end is enough.
    assert longest_hit([window], [window_row[:13]], 0) == 13
    assert longest_hit([window], [[False] * 13], 0) == 0


def test_blocks_vllm_holds_itself_need_not_be_in_the_store() -> None:
    full, window = GroupRule(FULL, BS), GroupRule(WINDOW, BS, 128)
    # vLLM's own cache covers blocks 0..9; rows start at block 10.
    assert longest_hit([full, window], [[True, True, False], [True, True, True]], 10) == 12
    assert longest_hit([full, window], [[False] * 3, [True] * 3], 10) == 10


def test_bad_rules_and_rows_are_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        GroupRule("mamba", BS)
    with pytest.raises(InvalidArgumentError):
        GroupRule(WINDOW, BS, 0)
    with pytest.raises(InvalidArgumentError):
        longest_hit([GroupRule(FULL, BS)], [[True], [True]], 0)
    with pytest.raises(InvalidArgumentError):
        longest_hit([GroupRule(FULL, BS)] * 2, [[True], [True, True]], 0)


def test_block_keys_name_the_sequence_hash_digest_group_head_slice_and_stage() -> None:
    tokens = list(range(5, 5 + 3 * BS + 7))
    one, two = BlockNames("vllm:m:x", BS, 1), BlockNames("vllm:m:x", BS, 2)
    seqs, digests = one.prompt(tokens)
    assert len(seqs) == len(digests) == 3
    assert one.key(seqs[0], digests[0], 0, 0, 1) == f"vllm:m:x/0x{seqs[0]:016x}.{digests[0]}#0of1"
    assert two.key(seqs[2], digests[2], 1, 3, 8) == f"vllm:m:x/kv1/0x{seqs[2]:016x}.{digests[2]}#3of8"
    assert (
        one.key(seqs[1], digests[1], 0, 1, 2, "/pp1.2")
        == f"vllm:m:x/pp1.2/0x{seqs[1]:016x}.{digests[1]}#1of2"
    )
    # A prompt sharing the first two blocks shares their keys, not the third's.
    other_seqs, other_digests = one.prompt(tokens[: 2 * BS] + [9] * BS)
    assert other_seqs[:2] == seqs[:2] and other_digests[:2] == digests[:2]
    assert other_seqs[2] != seqs[2] and other_digests[2] != digests[2]
