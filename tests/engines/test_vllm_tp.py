"""One stored layout for every TP size (issue 40 item 2), through vLLM's real worker-side connector: a
prefix written at TP=2 is read at TP=1, 2, 4 and 8, byte-exact, each reader rank moving only its heads;
under the head_split setting, fewer members per block, read by the TP sizes that divide it."""

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


def test_head_split_2_is_read_at_tp1_and_tp2_is_refused_at_tp4_and_never_mixes_with_other_splits(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """The connector's head_split=2 on the 4-KV-head model: the TP=2 writer stores 2 members per block
    (#0of2, #1of2; no #<i>of4), each of its ranks one; TP=1 and TP=2 readers with the setting count the 3
    shared blocks and load them byte-exact, each rank exactly its heads' share; a head_split=2 reader finds
    none of the default split's members and a default reader none of head_split=2's (the member key names
    the split); TP=4 (half a member per rank) is refused at construction on both roles with HeadSplit's
    NotSupportedError naming the setting."""
    out = run_scenario(engines_python, "vllm_tp", store_cluster, tmp_path, args=["head_split"])["split2"]
    assert out["probe_matched"] == [0], out
    assert out["members_of_2"] == [True] * 8 and out["members_of_4"] == [False] * 16, out
    assert out["writer_saved_bytes"] == [out["writer_share"]] * 2, out
    for tp in (1, 2):
        reader = out[f"tp{tp}"]
        assert reader["matched"] == [48] and reader["equal_bytes"], (tp, reader)
        assert reader["loaded_bytes"] == [reader["share"]] * tp, (tp, reader)
        assert reader["failed_loads"] == [0] * tp, (tp, reader)
    assert out["default_split_matched"] == [0], out
    for role in ("SCHEDULER", "WORKER"):
        refusal = out["tp4_refused"][role]
        assert refusal.startswith("NotSupportedError: head_split=2 (KVSTORE_HEAD_SPLIT)"), refusal
        assert "not a multiple of TP size 4" in refusal, refusal
