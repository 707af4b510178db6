"""The `engines` tier: kvstore's connectors run by the real vLLM and SGLang code, in a virtual environment
of their own (tests/engines/setup_env.sh builds it once; later runs only reinstall kvstore into it)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest

from kvstore.procs import kvstore_process

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SETUP = HERE / "setup_env.sh"
NO_TORCH = 3  # setup_env.sh's exit status when the pinned CPU torch wheel cannot be installed here


@pytest.fixture(scope="session")
def engines_python() -> Path:
    """The engines environment's interpreter (built on first use: a few minutes)."""
    venv = Path(os.environ.get("ENGINES_VENV", ROOT / ".engines-venv"))
    run = subprocess.run(
        ["bash", str(SETUP), str(venv)],
        capture_output=True,
        text=True,
        timeout=1500,
        stdin=subprocess.DEVNULL,
    )
    if run.returncode == NO_TORCH:
        pytest.skip(f"engines tier: {run.stderr.strip().splitlines()[-1]}")
    assert run.returncode == 0, f"setup_env.sh failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return venv / "bin" / "python"


@pytest.fixture
def store_cluster() -> Iterator[str]:
    """A master and one 256 MiB storage node, as processes; yields the master's address."""
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(["master", "--port", "0"]))
        master = ready.split()[0]
        stack.enter_context(kvstore_process(["node", "--master", master, "--segment-size", "256MiB"]))
        yield master


def run_scenario(
    python: Path, name: str, master: str, tmp: Path, timeout: float = 600, args: list[str] | None = None
) -> dict:
    """Runs tests/engines/scenarios/NAME.py in the engines environment (from a temp dir, so the checkout
    is never imported) and returns the JSON it prints last."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSTORE_") and k != "PYTHONPATH"}
    env["KVSTORE_MASTER"] = master
    env["KVSTORE_CLUSTER_SECRET"] = os.environ["KVSTORE_CLUSTER_SECRET"]  # (the suite's cluster)
    run = subprocess.run(
        [str(python), str(HERE / "scenarios" / f"{name}.py"), *(args or [])],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, f"{name} failed:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    # The last line that is a JSON object (engines log to stdout as well, and may do so after it).
    last = [line for line in run.stdout.splitlines() if line.startswith("{")][-1]
    return json.loads(last)


def load_scenario(name: str) -> ModuleType:
    """tests/engines/scenarios/NAME.py loaded as a module here, for its constants and prompts (a scenario
    imports its engine only in main()); its folder is on sys.path while it loads, as when it runs, so
    its engine-free shared module (llm_common) imports."""
    folder = str(HERE / "scenarios")
    spec = importlib.util.spec_from_file_location(name, HERE / "scenarios" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def run_reuse_roles(python: Path, name: str, master: str, tmp: Path, args: list[str] | None = None) -> dict:
    """A vllm.LLM scenario's three roles, each a fresh process: `reference` (no connector: vLLM's own
    prefix cache and the cold tokens), `first` (stores its prompt), `second` (shares the first's blocks).
    Returns role -> the JSON it printed. The reference touches no store, so it runs beside the first (a
    vLLM process spends most of its start on one core: three in a row were the tier's longest wait), from
    a folder of its own, where it writes its own copy of the model (the same config and seeded weights:
    never two processes writing one file); the second starts only once the first has stored its prompt."""
    apart = tmp / "reference"
    apart.mkdir(exist_ok=True)

    def role(which: str) -> dict:
        where = apart if which == "reference" else tmp
        return run_scenario(python, name, master, where, args=[*(args or []), which])

    with ThreadPoolExecutor(max_workers=1) as beside:
        reference = beside.submit(role, "reference")
        first = role("first")
        second = role("second")
        return {"reference": reference.result(), "first": first, "second": second}


def assert_second_reuses_as_its_own_cache_would(runs: dict, shared_tokens: int, computed_tokens: int) -> None:
    """The second instance is served through the store what vLLM's own prefix cache serves an instance
    that ran the first prompt (`shared_tokens`), computes only the rest, and generates the cold tokens."""
    reference, second = runs["reference"], runs["second"]["second"]
    assert reference["second"]["num_cached_tokens"] == shared_tokens, reference  # vLLM's own cache
    assert reference["second_cold"]["num_cached_tokens"] == 0
    assert runs["first"]["first"]["num_cached_tokens"] == 0
    assert second["num_cached_tokens"] == reference["second"]["num_cached_tokens"]
    assert second["prompt_tokens"] - second["num_cached_tokens"] == computed_tokens
    assert second["tokens"] == reference["second_cold"]["tokens"] and len(second["tokens"]) == 8
    assert runs["first"]["first"]["tokens"] == reference["first"]["tokens"]
