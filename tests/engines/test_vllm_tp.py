"""One stored layout for every TP size (issue 40 item 2), through vLLM's real worker-side connector: a
prefix written at TP=2 is read at TP=1, 2, 4 and 8, byte-exact, each reader rank moving only its heads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engines.conftest import run_scenario

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

READERS = (1, 2, 4, 8)


def test_a_prefix_written_at_tp2_is_read_at_every_tp_size_moving_only_each_ranks_heads(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """The real Scheduler of each reader counts the 3 shared blocks (48 tokens); every rank's loaded
    blocks equal the writer's blocks of the same global KV heads byte for byte (a block a reader computed
    itself would differ); each rank's connector stats report exactly its heads' share of those 3 blocks
    loaded (TP=8: one head, replicated on two ranks, each reading it); the writer's two ranks together
    stored each head once."""
    out = run_scenario(engines_python, "vllm_tp", store_cluster, tmp_path)
    assert out["writer_matched"] == [0]
    assert out["writer_saved_bytes"] == [out["writer_share"]] * 2
    for tp in READERS:
        reader = out[f"tp{tp}"]
        assert reader["matched"] == [48], (tp, reader)
        assert reader["equal_bytes"] and not reader["nan_in_loaded"], (tp, reader)
        assert reader["loaded_bytes"] == [reader["share"]] * tp, (tp, reader)
        assert reader["failed_loads"] == [0] * tp and reader["unfinished"] == 0, (tp, reader)
