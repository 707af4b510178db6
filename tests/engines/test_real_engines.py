"""kvstore's connectors under the real engines' code (pytest -m engines; tests/run includes the tier)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from kvstore.procs import kvstore_process
from tests.engines.conftest import load_scenario, run_scenario

# The first test builds the engines environment (engines_python: minutes on a fresh machine, which the
# suite's 300 s per-test limit cut short on a clean CI machine); the scenarios themselves are bounded.
pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]


def test_vllm_scheduler_and_worker_share_a_prefix_across_instances(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """Instance A saves a 4-block prompt; a fresh instance B with 3 blocks in common gets 48 matched
    tokens from the real Scheduler, loads exactly those 3 blocks, and its KV equals A's byte for byte.
    A block is stored as one member per KV head (2 here: every TP size reads whole members)."""
    out = run_scenario(engines_python, "vllm_scheduler", store_cluster, tmp_path)
    assert out["a_matched"] == [0]
    assert out["a_saved_blocks"] == 4 * 2
    assert out["b_matched"] == [48]
    assert out["b_loaded_keys"] == 3 and out["b_loaded_blocks"] == 3 * 2 and out["b_failed_loads"] == 0
    assert out["equal_bytes"] and not out["nan_in_loaded"]
    assert out["b_saved_blocks"] == 1 * 2  # only its own 4th block: the first 3 were already stored
    assert out["b_unfinished"] == 0


def test_vllm_llm_end_to_end_reuses_a_stored_prefix_with_identical_tokens(
    engines_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """vllm.LLM on CPU, three fresh instances on one store: no connector (reference), one that saves a
    1,024-token prompt, one whose 1,056-token prompt shares 31 blocks with it. The last computes only
    its uncached 64 tokens and generates exactly the reference's tokens.

    The first instance also publishes vLLM's own KV events to a routing index (`kvstore index`,
    registered before it starts): afterwards the index names it as holding the first prompt's 32 blocks
    on its GPU, and 31 of the second's."""
    with kvstore_process(["index", "--port", "0"]) as (_, ready):
        index = ready.removeprefix("http://")
        events = [f"ipc://{tmp_path}/kv-events", f"ipc://{tmp_path}/kv-replay"]
        register = {"endpoint": events[0], "replay_endpoint": events[1], "type": "vLLM", "modelname": "llama",
                    "instance_id": "first", "block_size": 32, "dp_rank": 0}  # fmt: skip
        assert _post(index, "/register", register)["instance_id"] == "first"
        runs = {
            role: run_scenario(
                engines_python,
                "vllm_llm",
                store_cluster,
                tmp_path,
                args=[role, "--kv-events", *events] if role == "first" else [role],
            )
            for role in ("baseline", "first", "second")
        }
        prompts = _vllm_llm_prompts()
        for role, blocks in (("first", 32), ("second", 31)):
            query = {"model": "llama", "token_ids": prompts[role], "block_size": 32}
            row = _post(index, "/query", query)["default"]["first"]
            assert row["longest_matched"] == row["GPU"] == blocks * 32, (role, row)
        status = _get(index, "/status")["publishers"][0]
        assert status["batches"] > 0 and status["bad_batches"] == 0 and status["unplaced_blocks"] == 0
    assert runs["baseline"]["num_cached_tokens"] == 0 and runs["first"]["num_cached_tokens"] == 0
    assert runs["second"]["num_cached_tokens"] == 31 * 32  # through the connector: its own cache is cold
    assert runs["second"]["prompt_tokens"] - runs["second"]["num_cached_tokens"] == 64
    assert runs["second"]["tokens"] == runs["baseline"]["tokens"] and len(runs["baseline"]["tokens"]) == 8
    print(
        "TTFT s: "
        + ", ".join(
            f"{role} {run['ttft_s']:.3f} ({run['num_cached_tokens']} cached)" for role, run in runs.items()
        )
    )


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


def _post(address: str, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection(address, timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(body).encode())
        reply = conn.getresponse()
        data = json.loads(reply.read())
        assert reply.status == 200, data
        return data
    finally:
        conn.close()


def _get(address: str, path: str) -> dict:
    conn = http.client.HTTPConnection(address, timeout=30)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def _vllm_llm_prompts() -> dict[str, list[int]]:
    """The vllm_llm scenario's prompts (its module is only loaded: it imports vLLM only in main())."""
    return load_scenario("vllm_llm").prompts()
