"""The engine handshake asks for the cluster secret (issue: nobody outside the cluster gets in): an engine
of another cluster, or a raw socket, gets no descriptor (so no region, address or access key), and the
engine logs who was refused; engines that share the secret link as before."""

from __future__ import annotations

import os
import socket
import struct
import tempfile
import time

import numpy as np
import pytest

from tests.conftest import start_target, stop_target
from tests.helpers.target_process import pattern
from transfer_engine import TransferEngine
from transfer_engine.errors import PermissionDeniedError

MAGIC = 0x4B565342


def test_an_engine_of_another_cluster_gets_nothing_and_is_logged() -> None:
    with tempfile.TemporaryFile("w+") as log:
        other = ["env", "KVSTORE_CLUSTER_SECRET=the-secret-of-another-cluster-42"]
        target = start_target(prefix=other, stderr=log)
        try:
            with (
                TransferEngine() as engine,  # (the suite's secret)
                pytest.raises(PermissionDeniedError, match="does not share this cluster secret"),
            ):
                engine.open_peer(target.name)
            deadline = time.monotonic() + 5
            while "refused a handshake from 127.0.0.1:" not in (log.seek(0) or log.read()):
                assert time.monotonic() < deadline, log.read()
                time.sleep(0.05)
            assert "wrong cluster secret" in (log.seek(0) or log.read())
        finally:
            stop_target(target)


def test_engines_sharing_the_secret_link() -> None:
    target = start_target()
    try:
        with TransferEngine() as engine:
            peer = engine.open_peer(target.name)
            local = engine.allocate(4096)
            assert local.array is not None
            local.array[:] = 0xFF  # (a byte the pattern (values < 251) never holds: a read that
            # moves nothing cannot pass)
            engine.read(local.addr, peer, target.shared_region, 0, 4096)
            assert np.array_equal(local.array, pattern(4096))
    finally:
        stop_target(target)


def test_an_engine_started_without_the_secret_is_told_to_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    target = start_target()
    try:
        monkeypatch.delenv("KVSTORE_CLUSTER_SECRET")  # (loopback only: allowed without one)
        with (
            TransferEngine() as engine,
            pytest.raises(PermissionDeniedError, match="this process none: set KVSTORE_CLUSTER_SECRET_FILE"),
        ):
            engine.open_peer(target.name)
    finally:
        stop_target(target)


def _received(target_name: str, payload: bytes) -> bytes:
    host, port = target_name.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack("<IHH", MAGIC, 1, 0),  # the hello of version 1, which got the descriptor at once
        struct.pack("<IHH", MAGIC, 2, 0) + os.urandom(32) + os.urandom(32),  # a made-up proof
        b"\x00" * 4096,
    ],
)
def test_a_raw_socket_gets_no_descriptor(payload: bytes) -> None:
    target = start_target()
    try:
        received = _received(target.name, payload)
        assert len(received) in (0, 4 + 32 + 32)  # at most the engine's challenge: never the descriptor
        with TransferEngine() as engine:  # and the engine still serves its cluster
            engine.open_peer(target.name)
    finally:
        stop_target(target)
