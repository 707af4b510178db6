"""`kvstore config` piped into another program (grep, a file, a CI log) prints every setting's name, value,
source and variable whole, one setting a line: a terminal's boxed table cut them at 80 columns there."""

from __future__ import annotations

import os
import subprocess
import sys

from kvstore.config import MasterConfig, known_variables

LONG_ENDPOINT = "ipc:///run/kvstore/" + "a-rather-long-directory-name/" * 4 + "events"


def kvstore(*args: str, **env: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", *args],
        capture_output=True,  # (stdout a pipe, not a terminal)
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_settings_are_whole_lines() -> None:
    out = kvstore("config", "--component", "master", KVSTORE_MASTER_KV_EVENTS_ENDPOINT=LONG_ENDPOINT)
    lines = out.splitlines()
    assert "…" not in out
    for info in MasterConfig.field_settings():
        line = next((line for line in lines if line.split()[:1] == [info.name]), None)
        assert line is not None, info.name
        assert line.split()[-1] == info.variable
    endpoint = next(line for line in lines if line.startswith("kv_events_endpoint "))
    assert endpoint.split() == [
        "kv_events_endpoint",
        LONG_ENDPOINT,
        "environment",
        "KVSTORE_MASTER_KV_EVENTS_ENDPOINT",
        "KVSTORE_MASTER_KV_EVENTS_ENDPOINT",
    ]


def test_variables_are_whole_lines() -> None:
    out = kvstore("config", "--variables")
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()[2:] if line.strip()}
    assert rows == {name: what for name, what in known_variables().items()}
