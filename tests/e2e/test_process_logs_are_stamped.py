"""The processes' log lines carry their time (ISO 8601, UTC, milliseconds) and level: a master's status
lines on stdout, a node's and an index's lines, warnings on stderr; the READY lines that starters read stay
bare. Real processes, as a user starts them."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (INFO|WARNING|ERROR) kvstore (\w+): (.+)$")


@contextmanager
def started(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvstore.cli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KVSTORE_LIFELINE": "stdin"},
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("READY "), (ready, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, ready.split()[1]
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)


def _stamped(line: str, process: str, level: str) -> str:
    """The message of a stamped line, after checking its time is now in UTC."""
    match = STAMP.match(line.strip())
    assert match, line
    when = datetime.datetime.fromisoformat(match[1]).replace(tzinfo=datetime.timezone.utc)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 120, line
    assert (match[2], match[3]) == (level, process), line
    return match[4]


def test_master_status_lines_are_stamped() -> None:
    with started("master", "--port", "0", "--http-port", "0") as (proc, address):
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
    said = [_stamped(line, "master", "INFO") for line in lines]
    assert said[0].startswith(f"listening on {address} (authentication: ")
    assert said[1].startswith("connections: up to ")
    assert said[2].startswith("metrics on http://127.0.0.1:")


def test_node_lines_and_warnings_are_stamped(tmp_path: Path) -> None:
    with started("master", "--port", "0") as (_, address):
        missing = tmp_path / "no-such-dir"
        args = ["node", "--master", address, "--segment-size", "16MiB", "--memory-dir", str(missing)]
        with started(*args) as (node, _):
            pass
        assert node.stderr is not None
        lines = node.stderr.read().splitlines()
    warning = next(line for line in lines if "is not a writable directory" in line)
    assert _stamped(warning, "node", "WARNING").startswith(f"{missing} is not a writable directory")
    ready = next(line for line in lines if "segment of " in line)
    assert " ready in " in _stamped(ready, "node", "INFO")
    assert all(STAMP.match(line) for line in lines), lines


def test_index_status_line_is_stamped() -> None:
    with started("index", "--port", "0") as (proc, url):
        assert proc.stdout is not None
        line = proc.stdout.readline()
    assert _stamped(line, "index", "INFO") == f"serving Conductor's API on {url}"
