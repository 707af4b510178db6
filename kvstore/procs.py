"""Child processes the CLI and benches start: `kvstore ...` in this interpreter, ready when it prints a
READY line; stopped by closing its stdin (then killed if it lingers)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kvstore.errors import KVStoreError

READY_PREFIX = "READY "


@contextmanager
def kvstore_process(
    args: Sequence[str], timeout: float = 60.0
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Runs `kvstore ARGS`; yields (process, the rest of its READY line)."""
    cmd = [sys.executable, "-m", "kvstore.cli", *args]
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith(READY_PREFIX):
            proc.kill()
            raise KVStoreError(
                f"`kvstore {' '.join(args)}` did not start (exit {proc.wait()}): {line.strip()}"
            )
        yield proc, line[len(READY_PREFIX) :].strip()
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[str], timeout: float = 10.0) -> None:
    """Closes stdin (the child's signal to stop), then SIGTERM, then SIGKILL."""
    if proc.stdin and not proc.stdin.closed:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    for escalate in (proc.terminate, proc.kill):
        try:
            proc.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            escalate()
            timeout = 5.0
    proc.wait()
