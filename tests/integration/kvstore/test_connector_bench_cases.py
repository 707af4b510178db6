"""`kvstore bench connector --case hybrid|tp-mismatch` (issue 40): small runs against real clusters that
check what each case moves and that every loaded byte is the saved one; never its speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from kvstore import Store
from kvstore.bench.connector_cases import CaseRun, plan_case, vllm_kv_groups
from kvstore.integrations.paged import BlockMover, StoreLink

KIB = 1024
# The geometry the tests count with (kvstore.bench.models): gemma3-4b has 34 layers, 4 KV heads of 256
# bf16 values (K and V: 1 KiB per token and head), 16 tokens a block; llama3-8b 32 layers, 8 heads of 128.
GEMMA_HEAD_BLOCK = 16 * 2 * 256 * 2  # one head's block of one layer: 16 KiB
LLAMA_HEAD_BLOCK = 16 * 2 * 128 * 2  # 8 KiB


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "bench", "connector", *args],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def bench_json(*args: str) -> dict[str, Any]:
    r = bench(*args, "--requests", "2", "--segment-size", "256MiB", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    for field in ("save_gbps", "load_gbps", "store_put_gbps", "store_get_gbps", "baseline_gbps"):
        assert out[field] > 0, field
    for field in ("save_overhead", "load_overhead", "save_p50_ms", "load_p50_ms", "baseline_kind"):
        assert field in out
    return out


def test_kv_cache_groups_are_vllms() -> None:
    """vLLM 0.32's grouping (kv_cache_utils._get_kv_cache_groups_uniform_page_size; checked against it
    by hand in the engines environment for 6, 34, 48 and 62 layers): the issue's tiny Gemma 3 makes five
    sliding-window groups and one full; gemma3-4b six sliding groups of layers k::6 of the sliding ones
    (the last one short: vLLM pads it) and one of the five full-attention layers."""
    tiny = vllm_kv_groups(6, 6, 16, 128)
    assert [(g.rule.kind, g.layers) for g in tiny] == [("window", (i,)) for i in range(5)] + [("full", (5,))]
    groups = vllm_kv_groups(34, 6, 16, 128)
    sliding = [i for i in range(34) if (i + 1) % 6]
    assert [g.layers for g in groups[:6]] == [tuple(sliding[k::6]) for k in range(6)]
    assert groups[6].rule.kind == "full" and groups[6].layers == (5, 11, 17, 23, 29)
    assert {g.rule.span for g in groups[:6]} == {128}
    (dense,) = vllm_kv_groups(32, 1, 16, 0)
    assert dense.rule.kind == "full" and dense.layers == tuple(range(32))


def test_hybrid_case_saves_every_group_and_loads_what_vllm_reads() -> None:
    """8 blocks, a 48-token window: a hit of 8 blocks reads blocks 5..7 of each window group (vLLM's
    rule: tokens from 128 - 48 + 1 on) and all 8 of the full-attention group; the bench verifies every
    loaded byte and that the skipped blocks were not written (errors == 0)."""
    out = bench_json("--case", "hybrid", "--blocks", "8", "--window", "48")
    assert out["errors"] == 0 and out["case"] == "hybrid" and out["model"] == "gemma3-4b"
    assert out["kv_cache_groups"] == 7 and out["head_split"] == 4 and out["window"] == 48
    assert (out["write_tp"], out["read_tp"]) == (1, 1)
    member = [5 * GEMMA_HEAD_BLOCK] * 5 + [4 * GEMMA_HEAD_BLOCK, 5 * GEMMA_HEAD_BLOCK]  # per group
    assert out["objects_saved"] == 7 * 8 * 4
    assert out["bytes_saved"] == 8 * 4 * sum(member)
    assert out["objects_loaded"] == (6 * 3 + 8) * 4
    assert out["bytes_loaded"] == 4 * (3 * sum(member[:6]) + 8 * member[6])
    assert out["reader_bytes"] == [out["bytes_loaded"]]


def test_tp_mismatch_case_reads_each_ranks_heads() -> None:
    """Written by two ranks, read by four: every member once, each reader a quarter of the bytes."""
    out = bench_json("--case", "tp-mismatch", "--blocks", "4")
    assert out["errors"] == 0 and out["case"] == "tp-mismatch" and out["model"] == "llama3-8b"
    assert (out["write_tp"], out["read_tp"], out["head_split"]) == (2, 4, 8)
    assert out["objects_saved"] == out["objects_loaded"] == 4 * 8
    assert out["bytes_saved"] == out["bytes_loaded"] == 4 * 8 * 32 * LLAMA_HEAD_BLOCK
    assert out["reader_bytes"] == [out["bytes_loaded"] // 4] * 4


def test_dense_case_keeps_its_fields() -> None:
    """Scripts read the dense case's JSON: its fields stay, the new ones describe it."""
    out = bench_json("--blocks", "4")
    assert out["errors"] == 0 and out["engine"] == "vllm" and out["model"] == "llama3-8b"
    # Since 2026-12-07 a block is its 8 KV heads' members, as the vLLM connector stores it (TP=1)
    assert out["object_bytes"] == (2 << 20) // 8 and out["blocks"] == 4 and out["requests"] == 2
    assert out["case"] == "dense" and out["objects_saved"] == 4 * 8 and out["bytes_loaded"] == 4 * (2 << 20)
    assert out["write_tp"] == out["read_tp"] == 1 and out["head_split"] == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--case", "hybrid", "--model", "llama3-8b"], "needs a hybrid model"),
        (["--case", "tp-mismatch", "--model", "gemma3-4b"], "needs a dense model"),
        (["--model", "gemma3-4b"], "the dense case needs a dense model"),
        (["--case", "hybrid", "--engine", "sglang"], "follows the vLLM connector"),
        (["--case", "tp-mismatch", "--read-tp", "3"], "does not divide"),
        (["--case", "tp-mismatch", "--model", "qwen2.5-7b", "--read-tp", "6"], "not a multiple"),
    ],
)
def test_cases_refuse_what_they_cannot_run(args: list[str], message: str) -> None:
    r = bench(*args, "--master", "127.0.0.1:1")  # refused before any connection
    assert r.returncode == 1 and message in r.stderr, r.stderr


@pytest.mark.parametrize(("write_tp", "read_tp"), [(1, 8), (8, 2), (4, 16), (16, 4)])
def test_tp_sizes_in_both_directions(shared_cluster: Any, write_tp: int, read_tp: int) -> None:
    """Fewer and more readers than writers, and ranks beyond the KV heads (TP=16 over 8 heads: two ranks
    hold each head; both read it, only the first writes it)."""
    result = run(shared_cluster.master, "tp-mismatch", blocks=2, write_tp=write_tp, read_tp=read_tp)
    member = 32 * LLAMA_HEAD_BLOCK
    assert result.errors == 0 and result.objects_saved == 2 * 8
    assert result.reader_bytes == [2 * member * max(1, 8 // read_tp)] * read_tp


def test_the_check_sees_a_wrong_or_a_stray_byte(shared_cluster: Any) -> None:
    """The bench's own verification has teeth: a loaded block differing from the writer's, a byte
    written into a block vLLM's rule skips, or a wrong byte on the plain side each fail it."""
    with Store.connect(shared_cluster.master) as store:
        mover = BlockMover(StoreLink.wrapping(store))
        try:
            case = CaseRun(store, mover, plan_case("hybrid", None, 48, 1, 1), 8, 1)
            assert case.measure().errors == 0
            tensor = case.target.tensors[0][0]  # position 0 of every group: group 0 is a window group
            for block in (7, 0):  # needed (the window's last), skipped (before the window)
                tensor[block, 0, 0, 0] ^= 1
                assert not case.verified()
                tensor[block, 0, 0, 0] ^= 1
                assert case.verified()
            case.plain.dst[123] ^= 1
            assert not case.plain.verified()
        finally:
            mover.close()


def run(master: str, case: str, blocks: int, write_tp: int = 1, read_tp: int = 1) -> Any:
    with Store.connect(master) as store:
        mover = BlockMover(StoreLink.wrapping(store))
        try:
            spec = plan_case(case, None, 48, write_tp, read_tp)
            return CaseRun(store, mover, spec, blocks, 1).measure()
        finally:
            mover.close()


def test_window_blocks_untouched_means_different(shared_cluster: Any) -> None:
    """The skipped blocks' check is not vacuous: the writer's and the reader's random blocks differ."""
    with Store.connect(shared_cluster.master) as store:
        mover = BlockMover(StoreLink.wrapping(store))
        try:
            case = CaseRun(store, mover, plan_case("hybrid", None, 48, 1, 1), 8, 1)
            assert not np.array_equal(case.source.tensors[0][0][:5], case.target.tensors[0][0][:5])
        finally:
            mover.close()
