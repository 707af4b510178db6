"""Runs Mooncake's side of a bench: kvstore/bench/mooncake_bench.py, a standalone script, with the Python
of an environment holding mooncake-transfer-engine-non-cuda; returns the JSON objects it printed."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from kvstore.errors import KVStoreError


def run_mooncake_side(python: str, args: list[str]) -> list[dict[str, Any]]:
    from kvstore.bench import mooncake_bench

    # -I: the script's folder (kvstore/bench, whose trace.py shadows the standard library's) is not put
    # on sys.path, nor is the caller's environment read.
    command = [python, "-I", mooncake_bench.__file__, *args]
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KVStoreError(f"could not run Mooncake's side with {python}: {exc}") from exc
    if done.returncode != 0:
        raise KVStoreError(f"Mooncake's side failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    try:
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    except ValueError as exc:
        raise KVStoreError(f"Mooncake's side printed what this bench cannot read: {exc}") from exc
