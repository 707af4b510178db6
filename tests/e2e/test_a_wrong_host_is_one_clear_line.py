"""A host that is not this machine's (an address of another host: EADDRNOTAVAIL) or a name that does not
resolve, as an operator's typo in a flag or an env file gives it: every listening command (master, a master
candidate of etcd, the index, a node's transfer engine) exits 1 with one line on stderr that names the host
and the option or variable to change, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): documentation only, never an address of this host
NO_SUCH_NAME = "nosuchhost.invalid"  # (.invalid never resolves: RFC 2606)


def kvstore(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvstore.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


def _one_clear_line(run: subprocess.CompletedProcess[str], host: str, change: str) -> None:
    assert run.returncode == 1, (run.returncode, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"kvstore: error: cannot listen on {host}:"), lines[0]
    reason = "is not an address of this host" if host == NOT_HERE else "does not resolve"
    assert reason in lines[0], lines[0]
    assert f"set {change} to an address of this host" in lines[0], lines[0]


def _nowhere() -> str:
    """An etcd address nothing listens on."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{closed.getsockname()[1]}"


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_master_host(host: str) -> None:
    run = kvstore("master", "--port", "0", "--host", host)
    _one_clear_line(run, host, "--host (KVSTORE_MASTER_HOST)")


def test_master_host_from_the_environment() -> None:
    run = kvstore("master", "--port", "0", KVSTORE_MASTER_HOST=NOT_HERE)
    _one_clear_line(run, NOT_HERE, "--host (KVSTORE_MASTER_HOST)")


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_master_candidate_host(host: str) -> None:
    """A candidate binds its RPC address before it asks etcd anything (none answers here)."""
    run = kvstore("master", "--port", "0", "--host", host, "--etcd", _nowhere(), "--advertise-host", host)
    _one_clear_line(run, host, "--host (KVSTORE_MASTER_HOST)")


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_index_host(host: str) -> None:
    run = kvstore("index", "--port", "0", "--host", host, "--insecure")  # (off loopback it needs that)
    _one_clear_line(run, host, "--host (KVSTORE_INDEX_HOST)")


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_node_host(host: str) -> None:
    master = subprocess.Popen(
        [sys.executable, "-m", "kvstore.cli", "master", "--port", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KVSTORE_LIFELINE": "stdin"},
    )
    try:
        assert master.stdout is not None
        ready = master.stdout.readline().split()
        assert ready and ready[0] == "READY", ready
        args = ("node", "--master", ready[1], "--segment-size", "16MiB", "--memory-dir", "", "--host", host)
        _one_clear_line(kvstore(*args), host, "--host (KVSTORE_HOST)")
    finally:
        master.terminate()
        master.wait(timeout=30)
