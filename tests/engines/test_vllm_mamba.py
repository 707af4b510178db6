"""The vLLM connector with Mamba / linear-attention state groups (issue 40, item 1): a state is saved where
vLLM checkpointed it and loaded into the block vLLM allocates for a hit.

pytest -m engines; the end-to-end test starts real vLLM processes (a few minutes on two cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.conftest import (
    assert_second_reuses_as_its_own_cache_would,
    run_reuse_roles,
    run_scenario,
)

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

SHARED_TOKENS = 12 * 32  # vllm_mamba_llm's second prompt shares 12 blocks of 32 with its first


def test_the_state_rule_is_vllms_own_mamba_manager(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """With vLLM's real MambaSpec and MambaManager: the connector's state rule skips what
    get_num_skipped_tokens skips; its longest hit equals find_longest_cache_hit over a pool holding the
    same state blocks (300 random patterns), and, next to a full-attention group, the fixed point of both
    managers' hits; Mamba outside "align" mode or with speculative blocks is not served; of vLLM's offers
    only whole-block boundaries of the prompt's blocks past the hit are saved."""
    out = run_scenario(engines_python, "vllm_mamba_rules", store_cluster, tmp_path)
    assert out["rule"] == "state" and out["skipped_agree"]
    assert out["hits"] == {"alone": [300, 300], "hybrid": [300, 300]}
    assert out["unserved"] == {"none_mode": True, "speculative": True}
    assert out["checkpointed"] == [[2, 1, 12], [5, 1, 15]]


def test_states_are_saved_where_vllm_checkpoints_them_and_loaded_into_the_block_it_allocates(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """vLLM's real Scheduler (HybridKVCacheCoordinator, MambaManager in "align" mode) with a full-attention
    group and a Mamba state group, and the real worker-side connector over CPU tensors:
    - A (6 blocks + 5 tokens): vLLM offers the state at boundary 96 only; exactly that state block is in
      the store when wait_for_save returns (the scenario overwrites it at once, as vLLM may reuse it), and
      it is the state of its boundary;
    - a fresh B sharing 6 blocks is credited what vLLM's own cache gives A for that prompt (96), loads
      full-attention blocks 0..5 and the state of block 5 only, into the block vLLM allocated for it,
      byte-exact; state blocks 0..4 are vLLM's null block, never written;
    - a fresh C sharing 4 blocks: every full-attention block is stored but no state at 64, so nothing is
      credited (vLLM's own cache: 0 too);
    - a fresh D whose state object is removed after its lookup: the load fails, is reported for the
      request (failed_recving) and vLLM recomputes it."""
    out = run_scenario(engines_python, "vllm_mamba_scheduler", store_cluster, tmp_path)
    assert out["a_matched"][0] == 0 and out["a_offers"] == [[1, 96]]
    assert out["a_state_saved"] == [5] and out["a_state_missing_after_save"] == 0
    assert out["a_states_are_their_boundaries"]
    assert out["local_hits"] == [96, 0]  # vLLM's own prefix cache on A for B's and C's prompts
    assert out["b_matched"] == [96]
    assert out["b_loads"] == [[0, 0], [0, 1], [0, 2], [0, 3], [0, 4], [0, 5], [1, 5]]
    assert out["b_state_target_is_block_5"] and out["b_state_equal"] and out["b_full_equal"]
    assert out["b_state_nulls"] == [True] * 5 and out["b_null_untouched"]
    assert out["b_failed_recving"] == []
    assert out["c_matched"] == [0] and out["c_loads"] == 0
    assert out["d_matched"] == [96, 0] and out["d_failed_recving"] == ["d"] and out["d_unfinished"] == 0


def test_a_fresh_instance_reuses_a_stored_linear_attention_state_as_its_own_cache_would(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """vllm.LLM on CPU, a tiny Qwen3-Next-style hybrid (3 Gated DeltaNet layers: a Mamba state group in
    "align" mode; 1 full-attention layer) with seeded random weights. A fresh second instance sharing 12
    blocks of a prompt the first stored is served as many tokens as vLLM's own prefix cache serves an
    instance that ran the first prompt itself (384), computes only the rest, and generates the tokens of
    an instance that computed the whole prompt, with bit-identical first-token log-probabilities
    (zeroing the loaded states moves them; before: 0 cached tokens, a state group turned the connector
    off)."""
    runs = run_reuse_roles(engines_python, "vllm_mamba_llm", store_cluster, tmp_path)
    reference, second = runs["reference"], runs["second"]["second"]
    assert reference["block_size"] == 32, reference  # (the attention page holds one state per block)
    assert_second_reuses_as_its_own_cache_would(runs, SHARED_TOKENS, computed_tokens=2 * 32 + 5)
    assert second["tokens"] == reference["second"]["tokens"]
    # the first token's top log-probabilities are bit-identical too: the loaded state is the computed one
    assert second["first_logprobs"] == reference["second_cold"]["first_logprobs"]


def test_a_sharded_state_is_read_by_each_rank_of_the_writers_tp_size_and_by_no_other(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """vLLM's real Scheduler with one real worker-side connector per TP rank (emulated in one process):
    a TP=2 writer stores each rank's state shard as its own member; a fresh TP=2 reader sharing 6 blocks
    is credited 96 tokens and each rank loads its own shard byte-exact into the block vLLM allocated; a
    TP=1 reader is credited nothing (a shard is not a TP=1 state: the key names the TP size), although
    the full-attention blocks are stored for every TP size."""
    out = run_scenario(engines_python, "vllm_mamba_tp", store_cluster, tmp_path)
    assert out["writer_matched"] == [0]
    assert out["tp2_matched"] == [96] and out["tp2_targets"] == [5]
    assert out["tp2_ranks_loaded_their_shard"] == [True, True]
    assert out["tp1_matched"] == [0] and out["tp1_sees_the_attention_blocks"]
