"""kvstore's connectors under the real engines' code (pytest -m engines; tests/run includes the tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.conftest import run_scenario

pytestmark = pytest.mark.engines


def test_vllm_scheduler_and_worker_share_a_prefix_across_instances(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """Instance A saves a 4-block prompt; a fresh instance B with 3 blocks in common gets 48 matched
    tokens from the real Scheduler, loads exactly those 3 blocks, and its KV equals A's byte for byte."""
    out = run_scenario(engines_python, "vllm_scheduler", store_cluster, tmp_path)
    assert out["a_matched"] == [0]
    assert out["a_saved_blocks"] == 4
    assert out["b_matched"] == [48]
    assert out["b_loaded_keys"] == 3 and out["b_loaded_blocks"] == 3 and out["b_failed_loads"] == 0
    assert out["equal_bytes"] and not out["nan_in_loaded"]
    assert out["b_saved_blocks"] == 1  # only its own 4th block: the first 3 were already stored
    assert out["b_unfinished"] == 0


def test_sglang_dynamic_factory_builds_the_backend_and_pages_round_trip(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    out = run_scenario(engines_python, "sglang_hicache", store_cluster, tmp_path)
    pages = out["keys"]
    assert out["mha_type"] == "KVStoreHiCacheStorage" and out["key_len"] == 64  # SHA-256 page hashes
    assert out["mha_exists_before"] == 0 and out["mha_exists_after"] == pages
    assert out["mha_set"] == [True] * pages
    assert out["mha_set_again_skipped"] == [[True] * pages, pages]  # already stored: not written again
    assert out["mha_exists_other_rank"] == 0  # MHA pages are per TP rank
    assert out["mha_get"] == [True] * pages and out["mha_equal"]
    assert out["mla_non_writer_set"] == [True, True]
    assert out["mla_exists_before"] == 0 and out["mla_exists_after"] == pages
    assert out["mla_get"] == [True] * pages and out["mla_equal"]
    assert out["plain_set"] and out["plain_equal"] and out["plain_exists"]
