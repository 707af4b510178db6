"""Small things a user of `kvstore node` read wrong (review F9): a small segment's ready line said
"segment of 0.0 GiB ready"; with no master the node said "pass one" without naming the option; and
`--help` named no variable for --host, unlike the settings beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kvstore.procs import kvstore_process
from tests.helpers.cli import kvstore

NO_MASTER = ("KVSTORE_MASTER", "KVSTORE_ETCD")  # (a node told of none by this environment)


def test_a_small_segment_is_said_in_its_own_unit(tmp_path: Path) -> None:
    with kvstore_process(["master", "--port", "0"]) as (_, ready):
        args = ["node", "--master", ready.split()[0], "--segment-size", "7MiB", "--memory-dir", ""]
        with open(tmp_path / "node.err", "w") as err:
            node = subprocess.Popen(
                [sys.executable, "-m", "kvstore.cli", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, "KVSTORE_LIFELINE": "stdin"},
            )
        assert node.stdout is not None and node.stdin is not None
        assert node.stdout.readline().startswith("READY ")
        node.stdin.close()
        assert node.wait(timeout=30) == 0
    said = (tmp_path / "node.err").read_text()
    assert "INFO kvstore node: segment of 7MiB ready in " in said, said


def test_a_node_without_a_master_names_the_option() -> None:
    run = kvstore("node", "--segment-size", "1MiB", "--memory-dir", "", drop=NO_MASTER)
    assert run.returncode != 0
    assert "no master address: pass --master HOST:PORT" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_the_nodes_host_option_names_its_variable() -> None:
    run = kvstore("node", "--help", drop=NO_MASTER)
    assert run.returncode == 0
    flat = " ".join(run.stdout.split())
    assert "serves on (KVSTORE_HOST; default 127.0.0.1)" in flat, run.stdout
