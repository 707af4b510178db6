"""`kvstore bench trace --plot` at the capacities asked for: a comma list of --capacity-blocks (or
--capacity-tokens, in whole blocks) is plotted exactly; one value is the middle of a 0.1x-10x sweep, marked
on the plot and named in the output; a list without --plot is refused (a replay runs at one capacity)."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")


def kvstore(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """300 requests over 50 shared prefixes, in the FAST'25 JSONL form."""
    rng = random.Random(1)
    path = tmp_path / "trace.jsonl"
    with open(path, "w") as f:
        for i in range(300):
            blocks, base = rng.randint(1, 20), rng.randint(0, 50) * 100
            row = {"timestamp": i * 100, "input_length": blocks * 512, "output_length": 10}
            f.write(json.dumps({**row, "hash_ids": list(range(base, base + blocks))}) + "\n")
    return path


def _plotted(trace: Path, png: Path, *capacity: str) -> tuple[set[int], str]:
    run = kvstore("bench", "trace", str(trace), "--plot", str(png), "--policy", "lru,adaptive", *capacity)
    assert run.returncode == 0, run.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capacities = {int(c) for c in re.findall(r"capacity=\s*(\d+)/node", run.stdout)}
    return capacities, run.stdout.strip().splitlines()[-1]


def test_a_list_of_capacities_is_plotted_exactly(trace: Path, tmp_path: Path) -> None:
    capacities, said = _plotted(trace, tmp_path / "a.png", "--capacity-blocks", "40,120,700")
    assert capacities == {40, 120, 700}
    assert said.endswith("(capacities per node in blocks: 40, 120, 700)")
    capacities, _ = _plotted(
        trace, tmp_path / "b.png", "--capacity-tokens", "1024,8192", "--block-tokens", "512"
    )
    assert capacities == {2, 16}


def test_one_capacity_is_the_middle_of_the_sweep_and_marked(trace: Path, tmp_path: Path) -> None:
    capacities, said = _plotted(trace, tmp_path / "c.png", "--capacity-blocks", "50")
    assert capacities == {5, 15, 50, 150, 500}
    assert said.endswith("(capacities per node in blocks: 5, 15, 50, 150, 500; 50 asked, marked)")


def test_a_list_without_plot_is_refused(trace: Path) -> None:
    run = kvstore("bench", "trace", str(trace), "--simulate", "--capacity-blocks", "40,120")
    assert run.returncode == 1
    assert run.stderr.strip() == "kvstore: error: several capacities are for --plot; a replay runs at one"
