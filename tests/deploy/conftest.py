from __future__ import annotations

import shutil

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "prometheus: runs Prometheus' own tools (Debian's prometheus; skipped without them)"
    )


def require_tool(name: str, package: str) -> str:
    """The path of the program `name`, or a skip naming what installs it."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed ({package}; .ci/run installs it)")
    return path
