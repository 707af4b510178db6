"""The cluster secret on the master RPC (issue: nobody outside the cluster gets in): a client without it,
or with another one, and a raw socket speaking anything but the handshake are refused before any request
is read, and change nothing; a client with it works; no secret means loopback only unless insecure."""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kvstore import Store, rpc
from kvstore.cluster.master_client import MasterClient
from kvstore.config import MasterConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import PermissionDeniedError
from kvstore.master.wire.server import EmbeddedMaster, Master
from kvstore.rpc import auth
from kvstore.rpc import messages as m
from tests.helpers.master_wire import MasterWire

SECRET = os.environ["KVSTORE_CLUSTER_SECRET"]  # the suite's (tests/conftest.py): clients use it too


@pytest.fixture
def master() -> Iterator[EmbeddedMaster]:
    embedded = Master.start_in_thread(security=SecurityConfig(cluster_secret=SECRET))
    yield embedded
    embedded.close()


def _objects(address: str) -> int:
    client = MasterClient(address, secret=SECRET.encode())
    try:
        return int(client.call(m.Stats())["objects"])
    finally:
        client.close()


@pytest.mark.parametrize("secret", [b"", b"another-secret-of-the-same-length!!"])
def test_a_client_without_the_secret_is_refused_and_changes_nothing(
    master: EmbeddedMaster, secret: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvstore.master")
    with Store.connect(master.address, segment_size=8 << 20) as store:
        store.put("kept", b"x" * 1000)
        outsider = MasterClient(master.address, timeout=5, secret=secret)
        with pytest.raises(PermissionDeniedError, match="cluster secret"):
            outsider.call(m.RemoveAll(force=True))
        outsider.close()
        assert _objects(master.address) == 1
        assert store.get("kept") == b"x" * 1000
    deadline = time.monotonic() + 5  # (the master logs on its own thread)
    while not any("refused a connection from 127.0.0.1:" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.02)


def test_a_flood_of_bad_peers_logs_a_line_a_second_not_a_line_each(
    master: EmbeddedMaster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvstore.master")
    for _ in range(40):  # each a made-up proof, refused
        client = MasterClient(master.address, timeout=5, secret=b"not-the-secret-the-master-knows")
        with pytest.raises(PermissionDeniedError):
            client.hello()
        client.close()
    assert _objects(master.address) == 0  # (the master still answers, and has logged meanwhile)
    refused = [r.getMessage() for r in caplog.records if "refused a connection" in r.getMessage()]
    assert 1 <= len(refused) <= 3, refused  # (the 40 took well under 3 s here)


def test_a_master_with_another_secret_is_refused_by_the_client(master: EmbeddedMaster) -> None:
    client = MasterClient(master.address, timeout=5, secret=b"not-the-secret-the-master-knows")
    with pytest.raises(PermissionDeniedError, match="does not share this cluster secret"):
        client.hello()
    client.close()
    client = MasterClient(master.address, timeout=5, secret=b"")  # started without the cluster's secret
    with pytest.raises(PermissionDeniedError, match="this process none: set KVSTORE_CLUSTER_SECRET_FILE"):
        client.hello()
    client.close()


@pytest.mark.parametrize(
    "garbage",
    [
        rpc.pack([1, "remove_all", {"force": True}]),  # a well-formed request with no handshake
        b"GET /metrics HTTP/1.1\r\n\r\n",
        auth.MAGIC + b"\x00" * 31,  # a hello cut short, then nothing
        auth.MAGIC + b"\x00" * auth.NONCE_SIZE + b"\x00" * auth.MAC_SIZE,  # a made-up proof
        b"\xff" * 4096,
    ],
)
def test_a_raw_socket_speaking_anything_else_gets_no_reply(master: EmbeddedMaster, garbage: bytes) -> None:
    host, port = rpc.parse_address(master.address)
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(garbage)
        s.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := s.recv(4096):
            received += chunk
    # At most the master's nonce (it proves nothing before the peer has): never a reply to a request.
    assert len(received) in (0, auth.NONCE_SIZE)
    assert _objects(master.address) == 0


def test_a_silent_connection_is_cut_off(master: EmbeddedMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "TIMEOUT_SECONDS", 0.3)
    host, port = rpc.parse_address(master.address)
    with socket.create_connection((host, port), timeout=10) as s:
        start = time.monotonic()
        assert s.recv(1) == b""  # closed by the master, not by this side
        assert time.monotonic() - start < 5
    assert _objects(master.address) == 0


def test_no_secret_means_loopback_only_unless_insecure() -> None:
    wide = MasterConfig.load(host="0.0.0.0", port=0)
    with pytest.raises(PermissionDeniedError, match="KVSTORE_INSECURE"):
        Master(wide, security=SecurityConfig())
    insecure = Master.start_in_thread(wide, security=SecurityConfig(insecure=True))
    try:
        assert insecure.master.describe()["master"]["authentication"] == "none (insecure)"
    finally:
        insecure.close()
    loopback = Master.start_in_thread(security=SecurityConfig())
    try:
        assert loopback.master.describe()["master"]["authentication"] == "none (loopback only)"
        client = MasterClient(loopback.address, secret=b"")
        client.hello()
        client.close()
    finally:
        loopback.close()


def test_the_secret_file_and_kvstore_secret_new(tmp_path: object, master: EmbeddedMaster) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "cluster.secret"

    def secret_new() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kvstore.cli", "secret", "new", str(path)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=60,
        )

    made = secret_new()
    assert made.returncode == 0, made.stderr
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_text().strip()) == 64
    again = secret_new()
    assert again.returncode == 1 and "exists" in again.stderr
    from_file = SecurityConfig(cluster_secret_file=str(path))
    served = Master.start_in_thread(security=from_file)
    try:
        client = MasterClient(served.address, secret=from_file.secret())
        client.hello()
        client.close()
    finally:
        served.close()
    path.chmod(0o644)
    with pytest.raises(PermissionDeniedError, match="chmod 600"):
        SecurityConfig(cluster_secret_file=str(path)).secret()


def test_a_flood_of_unauthenticated_sockets_never_locks_out_a_client() -> None:
    """Authenticate first, then count: sockets that never prove the secret are evicted oldest first once
    more than max_unauthenticated wait, so a client that authenticates always gets in."""
    config = MasterConfig.load(port=0, max_unauthenticated=8)
    flooded = Master.start_in_thread(config, security=SecurityConfig(cluster_secret=SECRET))
    host, port = rpc.parse_address(flooded.address)
    idle = [socket.create_connection((host, port), timeout=10) for _ in range(40)]
    try:
        client = MasterClient(flooded.address, timeout=5, secret=SECRET.encode())
        client.hello()  # (its connection is the newest: it evicts an idle one, never the other way)
        client.close()
        closed = 0
        for s in idle:
            s.settimeout(5)
            try:
                closed += s.recv(1) == b""
            except OSError:
                closed += 1
        assert closed >= 40 - 8
    finally:
        for s in idle:
            s.close()
        flooded.close()


def test_connections_per_host_are_bounded_and_the_idlest_goes_first() -> None:
    """Past max_connections_per_peer a new connection takes the place of that host's connection idle
    longest (its client reconnects at its next call), so a host's flood never locks its other clients
    out (issue 39, item 8: 4,096 connections from one host did); only when none is idle is the new one
    refused, with a clear error."""
    from kvstore.errors import TooManyConnectionsError

    config = MasterConfig.load(port=0, max_connections_per_peer=2)
    bounded = Master.start_in_thread(config, security=SecurityConfig(cluster_secret=SECRET))
    busy = [MasterWire(bounded.address, SECRET.encode()) for _ in range(2)]
    clients = [
        MasterClient(bounded.address, timeout=5, secret=SECRET.encode(), busy_poll_us=0) for _ in range(3)
    ]
    try:
        for wire in busy:  # a frame half-sent: owed an answer, not idle
            wire.sock.sendall(struct.pack("<I", 100) + b"x")
        with pytest.raises(TooManyConnectionsError, match="max_connections_per_peer"):
            clients[0].hello()
        for wire in busy:
            wire.close()
        deadline = time.monotonic() + 5  # (the master counts the closed ones out when it sees them go)
        while True:
            try:
                clients[0].hello()
                break
            except TooManyConnectionsError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        clients[1].hello()
        for _ in range(3):  # each call finds its connection gone or not, and every one is answered
            for c in clients:
                assert isinstance(c.call(m.Stats()), dict)
        assert len(bounded.master.table.by_host["127.0.0.1"]) <= 2
    finally:
        for c in clients:
            c.close()
        bounded.close()
