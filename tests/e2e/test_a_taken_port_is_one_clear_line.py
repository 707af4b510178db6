"""A port already in use, as a user meets it: every listening command (master RPC and HTTP, a master
candidate of etcd, the index, a node's transfer engine) exits non-zero with one line on stderr that says
which address is taken and which option or variable to change, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.helpers.cli import kvstore


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process (this one) listens on."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _one_clear_line(run: subprocess.CompletedProcess[str], port: int, change: str) -> None:
    assert run.returncode != 0, run.stdout
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(
        f"kvstore: error: cannot listen on 127.0.0.1:{port}: the port is already in use"
    )
    assert f"set {change} to another port" in lines[0]


def test_master_rpc_port(taken_port: int) -> None:
    run = kvstore("master", "--port", str(taken_port))
    _one_clear_line(run, taken_port, "--port (KVSTORE_MASTER_PORT)")


def test_master_rpc_port_from_the_environment(taken_port: int) -> None:
    run = kvstore("master", KVSTORE_MASTER_PORT=str(taken_port))
    _one_clear_line(run, taken_port, "--port (KVSTORE_MASTER_PORT)")


def test_master_http_port(taken_port: int) -> None:
    run = kvstore("master", "--port", "0", "--http-port", str(taken_port))
    _one_clear_line(run, taken_port, "--http-port (KVSTORE_MASTER_HTTP_PORT)")


def test_master_candidate_rpc_port(taken_port: int) -> None:
    """A candidate binds its RPC address before it asks etcd anything (none answers here)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nowhere = f"127.0.0.1:{closed.getsockname()[1]}"
    run = kvstore("master", "--port", str(taken_port), "--etcd", nowhere)
    _one_clear_line(run, taken_port, "--port (KVSTORE_MASTER_PORT)")


def test_index_port(taken_port: int) -> None:
    run = kvstore("index", "--port", str(taken_port))
    _one_clear_line(run, taken_port, "--port (KVSTORE_INDEX_PORT)")


def test_node_engine_port(taken_port: int) -> None:
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
        run = kvstore(
            "node",
            "--master",
            ready[1],
            "--segment-size",
            "16MiB",
            "--memory-dir",
            "",
            KVSTORE_PORT=str(taken_port),
        )
        _one_clear_line(run, taken_port, "KVSTORE_PORT (the transfer engine's port)")
    finally:
        master.terminate()
        master.wait(timeout=30)


def test_bench_transfer_target_port(taken_port: int) -> None:
    run = kvstore("bench", "transfer", "--mode", "target", "--port", str(taken_port))
    _one_clear_line(run, taken_port, "--port")


def test_master_kv_events_port(taken_port: int) -> None:
    endpoint = f"tcp://127.0.0.1:{taken_port}"
    run = kvstore("master", "--port", "0", "--kv-events-endpoint", endpoint, "--kv-events-tcp")
    _one_clear_line(run, taken_port, "--kv-events-endpoint (KVSTORE_MASTER_KV_EVENTS_ENDPOINT)")
