"""`kvstore ...` child processes (the generic helpers live in transfer_engine.procs, the lower layer)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence

from transfer_engine.procs import READY_PREFIX, module_process, stop_process


def kvstore_process(
    args: Sequence[str],
) -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
    """Runs `kvstore ARGS` (the CLI) as a child."""
    return module_process("kvstore.cli", args)


__all__ = ["READY_PREFIX", "kvstore_process", "module_process", "stop_process"]
