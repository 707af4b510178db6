"""A host that is not this machine's (an address of another host: EADDRNOTAVAIL) or a name that does not
resolve, as an operator's typo in a flag or an env file gives it: every listening command (master, a
master candidate of etcd, the index, a node's transfer engine) exits 1 with one line on stderr that names
the host and the option or variable to change, never a traceback. A name that does not resolve is tried
in a network namespace of its own (root; skipped otherwise): a lookup sends a query to the host's DNS
server, which these tests never contact."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.helpers.cli import kvstore

NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): documentation only, never an address of this host
NO_SUCH_NAME = "nosuchhost.invalid"  # (.invalid never resolves: RFC 2606)


# Its loopback up, nothing else: a DNS query fails there at once (no route), never reaching a server.
ISOLATED = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "isolated"]


def _isolated(host: str) -> list[str]:
    """The command's prefix for `host`: a namespace of its own for a name (its lookup would ask DNS)."""
    if host == NOT_HERE:
        return []
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("unshare", "nsenter", "ip")):
        pytest.skip(
            "a name's lookup is tried only in a network namespace of its own (root, unshare, nsenter, ip)"
        )
    return ISOLATED


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
    run = kvstore("master", "--port", "0", "--host", host, prefix=_isolated(host))
    _one_clear_line(run, host, "--host (KVSTORE_MASTER_HOST)")


def test_master_host_from_the_environment() -> None:
    run = kvstore("master", "--port", "0", KVSTORE_MASTER_HOST=NOT_HERE)
    _one_clear_line(run, NOT_HERE, "--host (KVSTORE_MASTER_HOST)")


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_master_candidate_host(host: str) -> None:
    """A candidate binds its RPC address before it asks etcd anything (none answers here)."""
    args = ("master", "--port", "0", "--host", host, "--etcd", _nowhere(), "--advertise-host", host)
    run = kvstore(*args, prefix=_isolated(host))
    _one_clear_line(run, host, "--host (KVSTORE_MASTER_HOST)")


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_index_host(host: str) -> None:
    run = kvstore(
        "index", "--port", "0", "--host", host, "--insecure", prefix=_isolated(host)
    )  # (off loopback)
    _one_clear_line(run, host, "--host (KVSTORE_INDEX_HOST)")


@pytest.mark.parametrize("host", [NOT_HERE, NO_SUCH_NAME])
def test_node_host(host: str) -> None:
    isolated = _isolated(host)  # (the node joins a master in its own namespace: it asks the master first)
    master = subprocess.Popen(
        [*isolated, sys.executable, "-m", "kvstore.cli", "master", "--port", "0"],
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
        inside = ["nsenter", f"--net=/proc/{master.pid}/ns/net"] if isolated else []
        _one_clear_line(kvstore(*args, prefix=inside), host, "--host (KVSTORE_HOST)")
    finally:
        master.terminate()
        master.wait(timeout=30)
