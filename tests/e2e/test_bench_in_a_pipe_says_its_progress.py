"""`kvstore bench ...` piped (a CI log, `| tee`): a progress bar draws nothing off a terminal, so a bench ran
for a minute in silence. Each step is now a line on stderr, flushed as it ends, while the JSON result on
stdout keeps its fields."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time

from kvstore.bench.store_bench import OpResult


def test_bench_store_steps_arrive_as_they_end_and_the_json_is_unchanged() -> None:
    args = ["bench", "store", "--ops", "put,get", "--duration", "1", "--segment-size", "256MiB", "--json"]
    began = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstore.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert proc.stderr is not None
    steps: list[tuple[float, str, bool]] = []  # (when, line, the bench still running)
    for line in proc.stderr:
        if line.startswith("store bench: "):
            steps.append((time.monotonic() - began, line.strip(), proc.poll() is None))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0
    said = [line for _, line, _ in steps]
    assert said[0] == "store bench: started"
    assert all(s.endswith(" s)") for s in said[1:])
    assert all(running for _, _, running in steps)  # each came while the bench still ran, not at its end
    rows = [json.loads(line) for line in out.strip().splitlines()]
    assert [r["op"] for r in rows][:2] == ["put", "get"]  # (and get's variants)
    assert [s.split(" done (")[0] for s in said[1:]] == [f"store bench: {r['op']}" for r in rows]
    assert all(set(r) == {f.name for f in dataclasses.fields(OpResult)} for r in rows)


def test_bench_master_says_its_own_name() -> None:
    """`kvstore bench master` piped said 'store bench: ...' (the store bench's label)."""
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "bench", "master", "--objects", "2000", "--json"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    steps = [line for line in run.stderr.splitlines() if line.startswith(("master bench: ", "store bench: "))]
    assert steps and steps[0] == "master bench: started", steps
    assert all(line.startswith("master bench: ") for line in steps), steps
