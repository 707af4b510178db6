"""The version is written once, as kvstore.__version__: the package's metadata takes it from there at build
time (pyproject.toml's dynamic version, scikit-build-core's regex provider), `kvstore --version` prints it,
and an installed kvstore's metadata says the same."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

import kvstore

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_pyproject_takes_the_version_from_the_package() -> None:
    if not PYPROJECT.exists():
        pytest.skip("run from an installed copy without the source tree")
    project = tomllib.loads(PYPROJECT.read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    provider = project["tool"]["scikit-build"]["metadata"]["version"]
    assert provider["provider"] == "scikit_build_core.metadata.regex"
    assert provider["input"] == "kvstore/__init__.py"


def test_installed_metadata_says_the_packages_version() -> None:
    """The distribution that installs the `kvstore` command (whatever its name on PyPI) has this version."""
    owners = [
        d
        for d in importlib.metadata.distributions()
        if any(e.group == "console_scripts" and e.value == "kvstore.cli:main" for e in d.entry_points)
    ]
    if not owners:
        pytest.skip("kvstore is not installed (imported from a source tree)")
    assert {d.version for d in owners} == {kvstore.__version__}
