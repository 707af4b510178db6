"""Child processes that benches and tests start: `python -m MODULE ...` in this interpreter, ready when
it prints a READY line; stopped by closing its stdin (then SIGTERM, then SIGKILL).

Servers (`kvstore master`, `kvstore node`, the transfer bench target) run until SIGTERM/SIGINT. Only
children started here also stop when their stdin closes: that lifeline is asked for explicitly through
the LIFELINE_ENV variable, never inferred from what stdin happens to be (/dev/null, a closed pipe under
nohup or systemd, a container without -i would otherwise stop a server at once).
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from transfer_engine.errors import InvalidArgumentError, KVStoreError

READY_PREFIX = "READY "
LIFELINE_ENV = "KVSTORE_LIFELINE"
"""Set to "stdin" in a child's environment: stop when stdin reaches EOF (the parent went away)."""


@contextmanager
def module_process(
    module: str, args: Sequence[str], prefix: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Runs `python -m MODULE ARGS` (after `prefix`, e.g. `ip netns exec NAME`); yields (process, the
    rest of its READY line)."""
    cmd = [*prefix, sys.executable, "-m", module, *args]
    # `python -m` puts the working directory first on sys.path: started from a source checkout after a
    # plain `pip install .`, the child would import the checkout (which has no built extension) instead of
    # what this process imported. Run it where our own packages live, so it imports the same ones.
    home = Path(__file__).resolve().parent.parent
    env = {**os.environ, LIFELINE_ENV: "stdin"}
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=home,
    )
    assert proc.stdout is not None and proc.stderr is not None
    said = _Forwarder(proc.stderr)
    try:
        line = proc.stdout.readline()
        if not line.startswith(READY_PREFIX):
            proc.kill()
            code = proc.wait()
            said.join(timeout=5)
            why = " / ".join([line.strip(), *said.tail]).strip(" /") or "it said nothing"
            raise KVStoreError(f"`{module} {' '.join(args)}` did not start (exit {code}): {why}")
        yield proc, line[len(READY_PREFIX) :].strip()
    finally:
        stop_process(proc)


class _Forwarder(threading.Thread):
    """Copies a child's stderr to ours as it comes, keeping its last lines (why it did not start)."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.tail: collections.deque[str] = collections.deque(maxlen=5)
        self.start()

    def run(self) -> None:
        for line in self.stream:
            sys.stderr.write(line)
            if line.strip():
                self.tail.append(line.strip())


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


def take_lifeline_request() -> bool:
    """True when this process was asked (LIFELINE_ENV=stdin) to stop at stdin EOF. The variable is removed
    so that processes this one starts do not inherit the request; anything else in it is an error."""
    value = os.environ.pop(LIFELINE_ENV, None)
    if value is None:
        return False
    if value != "stdin":
        raise InvalidArgumentError(f"{LIFELINE_ENV} must be 'stdin' (stop when stdin closes), got {value!r}")
    return True


def on_stop_request(callback: Callable[[], None], lifeline: bool | None = None) -> None:
    """Calls `callback` on SIGTERM/SIGINT, and at stdin EOF only when the lifeline was asked for (see
    take_lifeline_request; None asks the environment). Installs signal handlers: call from the main thread."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: callback())
    if lifeline is None:
        lifeline = take_lifeline_request()
    if lifeline:

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
