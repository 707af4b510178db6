"""The `engines` tier: kvstore's connectors run by the real vLLM and SGLang code, in a virtual environment
of their own (tests/engines/setup_env.sh builds it once; later runs only reinstall kvstore into it)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

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
