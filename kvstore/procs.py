"""`kvstore ...` child processes (the generic helpers live in transfer_engine.procs, the lower layer)."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import subprocess
import sys
from collections.abc import Sequence

from transfer_engine.procs import READY_PREFIX, module_process, stop_process


def kvstore_process(
    args: Sequence[str], prefix: Sequence[str] = ()
) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
    """Runs `kvstore ARGS` (the CLI) as a child (after `prefix`, e.g. `ip netns exec NAME`)."""
    return module_process("kvstore.cli", args, prefix)


def say_ready(fields: str) -> None:
    """Prints the READY line a supervisor or a parent waits for. A stdout that is gone (a pipe whose
    reader exited: `kvstore node ... | head -1`) is not a reason to stop serving: a server killed by it
    died after it joined, leaving its segment files and its registration behind. Its stdout then goes
    to /dev/null (so no later flush fails either), said once in the log."""
    try:
        print(f"{READY_PREFIX}{fields}", flush=True)
    except (BrokenPipeError, ValueError, OSError) as exc:  # (ValueError: a closed sys.stdout)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno() if not sys.stdout.closed else 1)
        os.close(null)
        logging.getLogger("kvstore").warning(
            "stdout is gone (%s): the READY line went nowhere; serving on", exc
        )


GC_YOUNG_THRESHOLD = 100_000


def settle_collector() -> None:
    """The garbage collector as a long-lived kvstore process runs it, once started (the master, a node, a
    bench's load process; bench/master_memory.py runs the master's state so too)."""
    # What was made while starting (modules, functions: ~34k objects; a load process's keys) lives as
    # long as the process: out of the collector's way, a full collection walks only what serving made
    # (was 15-18 ms a time on the master's loop; 45 ms in a load process holding 1.5M keys).
    gc.freeze()
    # A batch makes ~10 container objects a key that live until its reply is written: collected every
    # 700 allocations (the default), each batch's were walked and promoted many times over while still in
    # use (6-7% of the master's time under puts). Every 100,000, most are already freed by their counts.
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


__all__ = [
    "READY_PREFIX",
    "kvstore_process",
    "module_process",
    "say_ready",
    "settle_collector",
    "stop_process",
]
