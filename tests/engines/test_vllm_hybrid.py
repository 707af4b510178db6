"""The vLLM connector with window attention (issue 40, item 1): every KV cache group is stored and loaded.

pytest -m engines; each test starts real vLLM processes (about a minute each on two cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.conftest import (
    assert_second_reuses_as_its_own_cache_would,
    run_reuse_roles,
    run_scenario,
)

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

SHARED_TOKENS = 12 * 32  # vllm_hybrid's second prompt shares 12 blocks of 32 with its first


@pytest.mark.parametrize("model", ["gemma3", "mistral"])
def test_a_fresh_instance_reuses_stored_window_blocks_as_its_own_cache_would(
    model: str, engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """vllm.LLM on CPU: a Gemma-3-style hybrid (5 sliding-window layers, window 128, + 1 full: two KV cache
    groups) and a Mistral-style all-window model (one sliding-window group). A fresh second instance
    sharing 12 blocks of a prompt the first stored is served as many tokens as vLLM's own prefix cache
    serves an instance that ran the first prompt itself (384), computes only the rest, and generates the
    tokens of an instance without the connector. (Before: 0 cached tokens, the connector was off for any
    group but full attention.)"""
    runs = run_reuse_roles(engines_python, "vllm_hybrid", store_cluster, tmp_path, args=[model])
    assert_second_reuses_as_its_own_cache_would(runs, SHARED_TOKENS, computed_tokens=2 * 32 + 5)


def test_window_groups_are_saved_before_their_blocks_can_be_reused_and_loaded_only_where_vllm_reads(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """vLLM's real Scheduler (HybridKVCacheCoordinator) with a sliding-window group (window 32, block 16)
    and a full-attention group, and the real worker-side connector over CPU KV tensors:
    - every window-group object a step saves is in the store when wait_for_save returns, with the bytes
      it had then (the scenario overwrites the blocks at once, as vLLM may reuse them next step);
    - a fresh instance sharing 4 blocks is credited 64 tokens and loads full-group blocks 0..3 and
      window-group blocks 2..3 only; vLLM gives it the null block for window blocks 0..1, and nothing
      is written into the null block; everything loaded is byte-exact;
    - a window object removed between lookup and load: the load fails, is reported for the request
      (failed_recving; vLLM takes no failed block ids with several groups), and vLLM recomputes it
      (its second lookup finds the 3 blocks still whole)."""
    out = run_scenario(engines_python, "vllm_window_groups", store_cluster, tmp_path)
    assert out["a_matched"] == [0]
    assert out["a_window_saved"] == 6 and out["a_window_missing_after_save"] == 0
    assert out["b_matched"] == [64]
    assert out["b_loads"] == [[0, 2], [0, 3], [1, 0], [1, 1], [1, 2], [1, 3]]
    assert out["b_window_null"] == [True, True, False, False]
    assert out["b_full_equal"] and out["b_window_equal"] and out["b_null_untouched"]
    assert out["b_failed_recving"] == []
    assert out["c_matched"] == [80, 48]  # B stored its 5th block too; the failed load left 3 whole
    assert out["c_failed_recving"] == ["c"] and out["c_full_equal"] and out["c_unfinished"] == 0


def test_the_connectors_group_rules_are_vllms_own_and_a_mamba_group_counts_no_hit(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """With vLLM's real spec classes and managers: for full attention, MLA, sliding window (window 128 and
    100) and chunked local attention, the connector's skipped-token rule equals get_num_skipped_tokens
    and its longest hit equals find_longest_cache_hit over a pool holding the same blocks (300 random
    patterns each). Mamba state outside "align" mode and cross attention have no rule; a connector over a
    model with an align-mode Mamba group counts no hit when every full-attention block is stored but no
    state is (a hit needs the state at its end: test_vllm_mamba covers the state rule)."""
    out = run_scenario(engines_python, "vllm_group_rules", store_cluster, tmp_path)
    for kind in ("full", "mla", "window", "window_odd", "chunked"):
        assert out[kind]["skipped_agree"] and out[kind]["hits_agree"] == [300, 300], (kind, out[kind])
    assert out["unserved"] == {"mamba": True, "cross": True}
    assert out["mamba_stored"] and out["mamba_matched"] == [0, False]
