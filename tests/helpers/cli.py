"""The `kvstore` command run as a user runs it: a new process, stdin at /dev/null, output captured."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence


def kvstore(
    *args: str,
    timeout: float = 120,
    prefix: Sequence[str] = (),
    drop: Sequence[str] = (),
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """`kvstore ARGS` to its end. `prefix`: a command it runs under (unshare, nsenter); `drop`: variables of
    this environment it does not inherit; `env`: variables added."""
    inherited = {k: v for k, v in os.environ.items() if k not in drop}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "kvstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env={**inherited, **env},
    )
