"""`kvstore secret new /etc/kvstore/cluster.secret` on a fresh host failed with "No such file or
directory" (review F5): the command now makes the missing directory, closed to others (0700: who else
reads the secret is its owner's choice), says so, and writes the secret there; a parent that is a file
is one line naming it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path


def secret_new(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "secret", "new", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_missing_directory_is_made_closed_to_others(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "kvstore" / "cluster.secret"  # (neither directory there: a fresh host)
    run = secret_new(path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == f"made the directory {path.parent} (mode 0700)"
    assert f"export KVSTORE_CLUSTER_SECRET_FILE={path}" in run.stdout
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().strip()) == 64  # 256 bits, hex
    again = secret_new(tmp_path / "etc" / "kvstore" / "other.secret")  # the directory there: not made
    assert again.returncode == 0 and "made the directory" not in again.stdout


def test_a_parent_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "etc").write_text("not a directory")
    run = secret_new(tmp_path / "etc" / "cluster.secret")
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("kvstore: error: "), lines[0]
    assert str(tmp_path / "etc") in lines[0]
    assert not os.path.isdir(tmp_path / "etc")
