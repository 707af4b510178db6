"""An engine's servers are bounded without locking anyone out (issue: no client can take the cluster down):
idle and half-open sockets give their place to a peer that speaks the protocol, on the handshake endpoint
(64 at once, 16 per address) and on the tcp transport's server (KVSTORE_TCP_MAX_CONNECTIONS,
KVSTORE_TCP_MAX_CONNECTIONS_PER_PEER, KVSTORE_TCP_FIRST_FRAME_TIMEOUT); each cut is logged with the peer's
address."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import time
from collections.abc import Iterator

import numpy as np

from tests.conftest import start_target, stop_target
from tests.helpers.target_process import pattern
from transfer_engine import TransferEngine


@contextlib.contextmanager
def idle_sockets(address: str, count: int) -> Iterator[list[socket.socket]]:
    host, _, port = address.rpartition(":")
    sockets = []
    try:
        for _ in range(count):
            sockets.append(socket.create_connection((host, int(port)), timeout=5))
        yield sockets
    finally:
        for s in sockets:
            s.close()


def read_back(engine: TransferEngine, name: str, region: int) -> None:
    peer = engine.open_peer(name)
    local = engine.allocate(1 << 20)
    engine.read(local.addr, peer, region, 0, 1 << 20)
    assert np.array_equal(local.array, pattern(1 << 20))


def log_says(log: tempfile._TemporaryFileWrapper[str], text: str, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while text not in (log.seek(0) or log.read()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_flood_of_idle_sockets_on_the_handshake_endpoint_locks_no_engine_out() -> None:
    with tempfile.NamedTemporaryFile("w+") as log:
        target = start_target(stderr=log)
        try:
            with idle_sockets(target.name, 100), TransferEngine() as engine:  # (more than 64, and 16 a peer)
                read_back(engine, target.name, target.shared_region)
            assert log_says(log, "cut a connection from 127.0.0.1: a new connection needed its place")
        finally:
            stop_target(target)


def test_a_flood_of_idle_sockets_on_the_tcp_server_locks_no_engine_out() -> None:
    with tempfile.NamedTemporaryFile("w+") as log:
        limits = ["env", "KVSTORE_TCP_MAX_CONNECTIONS=8", "KVSTORE_TCP_MAX_CONNECTIONS_PER_PEER=6"]
        target = start_target(transport="tcp", prefix=limits, stderr=log)
        try:
            with TransferEngine(transport="tcp") as first:
                read_back(first, target.name, target.shared_region)
                data_port = first.paths(first.open_peer(target.name))[0].remote_address
            with idle_sockets(data_port, 40), TransferEngine(transport="tcp") as engine:
                read_back(engine, target.name, target.shared_region)  # its connections took idle ones' places
            assert log_says(log, "cut a connection from 127.0.0.1: a new connection needed its place")
        finally:
            stop_target(target)


def test_a_socket_that_never_speaks_is_cut_after_the_first_frame_timeout() -> None:
    with tempfile.NamedTemporaryFile("w+") as log:
        limits = ["env", "KVSTORE_TCP_FIRST_FRAME_TIMEOUT=0.5"]
        target = start_target(transport="tcp", prefix=limits, stderr=log)
        try:
            with TransferEngine(transport="tcp") as engine:
                read_back(engine, target.name, target.shared_region)
                data_port = engine.paths(engine.open_peer(target.name))[0].remote_address
                with idle_sockets(data_port, 1) as (idle,):
                    idle.settimeout(5)
                    started = time.monotonic()
                    assert idle.recv(1) == b""  # closed by the server
                    assert time.monotonic() - started < 3
                read_back(engine, target.name, target.shared_region)  # (its own connections spoke: kept)
            assert log_says(log, "it did not speak the protocol in time")
        finally:
            stop_target(target)
