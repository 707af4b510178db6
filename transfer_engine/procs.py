"""Child processes that benches and tests start: `python -m MODULE ...` in this interpreter, ready when
it prints a READY line; stopped by closing its stdin (then SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from transfer_engine.errors import KVStoreError

READY_PREFIX = "READY "


@contextmanager
def module_process(module: str, args: Sequence[str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Runs `python -m MODULE ARGS`; yields (process, the rest of its READY line)."""
    cmd = [sys.executable, "-m", module, *args]
    # `python -m` puts the working directory first on sys.path: started from a source checkout after a
    # plain `pip install .`, the child would import the checkout (which has no built extension) instead of
    # what this process imported. Run it where our own packages live, so it imports the same ones.
    home = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy(), cwd=home
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith(READY_PREFIX):
            proc.kill()
            raise KVStoreError(
                f"`{module} {' '.join(args)}` did not start (exit {proc.wait()}): {line.strip()}"
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


def on_stop_request(callback: Callable[[], None]) -> None:
    """Calls `callback` on SIGTERM/SIGINT, or when stdin closes while it is a pipe (a parent's lifeline:
    module_process stops children that way). Installs signal handlers: call from the main thread."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: callback())
    if not sys.stdin.isatty():

        def watch_stdin() -> None:
            with contextlib.suppress(OSError, ValueError):
                sys.stdin.read()
            callback()

        threading.Thread(target=watch_stdin, name="stop-on-stdin-eof", daemon=True).start()


def wait_for_stop_request() -> None:
    """Blocks until on_stop_request fires."""
    stop = threading.Event()
    on_stop_request(stop.set)
    stop.wait()
