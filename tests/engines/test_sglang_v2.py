"""SGLang's v2 HiCache storage interface (hybrid host pools) on kvstore, under SGLang's real backend
factory and storage classes (pytest -m engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.conftest import run_scenario

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]


def test_sglang_v2_hybrid_pools_round_trip_and_count_a_page_only_when_every_pool_has_it(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """A hybrid model's KV (v1), SWA and Mamba (v2) pages saved by one instance are found by a fresh
    one only at the prefix lengths where every pool meets SGLang's hit policy, and load byte-exact into
    fresh pools; a page missing one pool's piece stops counting; a KV pool in another layout misses."""
    out = run_scenario(engines_python, "sglang_v2", store_cluster, tmp_path)
    pages = out["pages"]
    assert out["type"] == "KVStoreHiCacheStorage"
    assert out["exists_before"] == [0, []]
    assert out["set_v2"] == {"swa": [True] * pages, "mamba": [True]}  # the last Mamba call's page
    assert out["exists_sides_only"] == [0, []]  # the side pools alone restore nothing
    assert out["set_v1"] == [True] * pages
    assert out["set_again_skipped"] == [[True] * pages, pages]  # already stored: not written again
    # Mamba state exists at pages 4 and 6 only, the SWA window (2 pages) everywhere: stops 4 and 6.
    assert out["exists_after"] == [6, [4, 6]]
    # A 5-page request: no Mamba state at page 5, so it restores 4 pages (the stop before).
    assert out["exists_at_4"] == [4, [4]] and out["exists_at_5"] == [4, [4]]
    assert out["get_v1"] == [True] * pages and out["kv_equal"]
    assert out["get_v2"] == {"swa": [True, True], "mamba": [True]}
    assert out["swa_equal"] and out["mamba_equal"] and out["swa_untouched_outside_window"]
    assert out["exists_other_kv_layout"] == [0, []]
    assert out["other_exists"] == [6, [6]]  # its only Mamba state is at page 6
    assert out["exists_without_swa_5"] == [0, []]  # the cut at 6 lost its SWA window: no stop left
    assert out["get_without_swa_5"] == [False]
    assert out["exists_without_kv_2"] == [0, []] and out["v1_exists_without_kv_2"] == 1


def test_sglang_v2_mla_kv_is_written_once_and_mamba_state_per_rank(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """An MLA model with Mamba state at TP=2: the KV pages are stored by the writer rank alone and read
    by rank 1; each rank stores and reads its own Mamba shard."""
    out = run_scenario(engines_python, "sglang_v2", store_cluster, tmp_path)
    pages = out["pages"]
    assert out["mla_rank1_set"] == [[True], [True] * pages]
    assert out["mla_exists_rank1_state_only"] == 0  # rank 1's set stored no KV
    assert out["mla_rank0_set_v1"] == [True] * pages
    assert out["mla_exists_rank1"] == [pages, [pages]]
    assert out["mla_get_rank1"] == [[True] * pages, [True]]
    assert out["mla_kv_equal_writer"] and out["mla_mamba_equal_own_rank"]
