"""`kvstore ...` child processes (the generic helpers live in transfer_engine.procs, the lower layer)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence

from transfer_engine.procs import READY_PREFIX, module_process, stop_process


def kvstore_process(
    args: Sequence[str], prefix: Sequence[str] = ()
) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
    """Runs `kvstore ARGS` (the CLI) as a child (after `prefix`, e.g. `ip netns exec NAME`)."""
    return module_process("kvstore.cli", args, prefix)


__all__ = ["READY_PREFIX", "kvstore_process", "module_process", "stop_process"]
