"""Python started in the root of a clone installed with `pip install .` imports the clone's kvstore/ (the
working directory comes first on sys.path), which has no compiled extensions: the README's example failed
with a bare "No module named 'kvstore._meta'" (review F7). Now the import of an extension there says the
source tree was imported and what to do. A copy of the package sources stands for the clone; its Python
reaches the installed dependencies through PYTHONPATH, without site (whose .pth files would put this
checkout's editable install in front of the copy)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import kvstore
import transfer_engine

SAYS = "was imported from its source tree ({}), which has no compiled extensions; run Python from outside"


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clone")
    for package in (kvstore, transfer_engine):
        source = Path(package.__file__).parent
        shutil.copytree(source, root / source.name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return root


def python_in(where: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]},
    )


def test_the_readme_example_in_the_clone_says_why_it_cannot_run(clone: Path) -> None:
    run = python_in(clone, "from kvstore import Store\nStore")
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: No module named 'kvstore._meta': kvstore "), last
    assert SAYS.format(clone / "kvstore") in last, last
    assert "or install the checkout editable (pip install -e .)" in last


def test_the_engine_in_the_clone_says_so_too(clone: Path) -> None:
    run = python_in(clone, "from transfer_engine import TransferEngine\nTransferEngine")
    last = run.stderr.strip().splitlines()[-1]
    assert SAYS.format(clone / "transfer_engine") in last, last


def test_what_needs_no_extension_still_imports_there(clone: Path) -> None:
    run = python_in(clone, "import kvstore.errors, kvstore.config; print(kvstore.__file__)")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == str(clone / "kvstore" / "__init__.py")


def test_the_installed_package_is_not_refused(tmp_path: Path) -> None:
    """Outside the clone (here: this checkout's editable install, its extensions in its build)."""
    run = subprocess.run(
        [sys.executable, "-c", "import kvstore._meta, transfer_engine._core"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
