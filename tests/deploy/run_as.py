"""Running deploy/'s commands as the users and with the capabilities their supervisor gives them, on this
host: root is needed (to become another user, to drop capabilities), and util-linux's setpriv."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# Reads the cluster secret file with kvstore's own reader as the effective user and group given (the
# modules are imported first, as root: this interpreter lives where another user may not read).
_READ_AS = """
import os, sys
from pathlib import Path
from transfer_engine.security import read_secret_file
uid, gid, path = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
os.setgroups([])
os.setegid(gid)
os.seteuid(uid)
read_secret_file(path)
"""


def require_root_and_setpriv() -> str:
    """setpriv's path, or a skip saying what is missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to run a command as another user, with only some capabilities)")
    path = shutil.which("setpriv")
    if path is None:
        pytest.skip("setpriv is not installed (util-linux)")
    return path


@contextmanager
def shared_scratch() -> Iterator[Path]:
    """A scratch directory every user may enter (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="kvstore-deploy-", dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path)


def read_secret_as(uid: int, gid: int, path: Path) -> subprocess.CompletedProcess[str]:
    """kvstore's read of the cluster secret file at `path` by that user (exit 0: the file is accepted)."""
    return subprocess.run(
        [sys.executable, "-c", _READ_AS, str(uid), str(gid), str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
