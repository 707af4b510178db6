"""Region keys are scoped to a handshake session, on the same-host grant socket too (issue 22, section 1):
a peer names its session and proves it, its keys are checked against that session, and only a process of
the engine's own user is served at all. (The tcp data connections: tests/integration/test_two_processes.)"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from collections.abc import Iterator

import pytest

from tests.helpers.raw_peer import open_session
from transfer_engine import TransferEngine


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[TransferEngine, int, str]]:
    """An engine serving one shareable region: the engine, the region's id, its shm grant socket."""
    with TransferEngine() as engine:
        region = engine.allocate(1 << 16)
        assert region.shareable
        socket_name = engine._core_engine().descriptor()["transports"]["shm"]["socket"]
        yield engine, region.id, socket_name


def _request(session: dict, regions: list[tuple[int, int]], proof: bytes | None = None) -> bytes:
    listed = b"".join(struct.pack("<QQ", region, key) for region, key in regions)
    if proof is None:
        proof = hmac.new(session["session_key"], b"grants" + listed, hashlib.sha256).digest()
    return struct.pack("<I", len(regions)) + session["session_id"] + proof + listed


def _grants(socket_name: str, request: bytes, expected: int) -> list[tuple[int, bool, int]]:
    """(region id, granted, descriptors attached) per reply; fewer than `expected` if the server hung up."""
    out: list[tuple[int, bool, int]] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(5)
        s.connect("\0" + socket_name)
        try:
            s.sendall(request)
            for _ in range(expected):
                data, fds, _flags, _addr = socket.recv_fds(s, 4096, 2)
                for fd in fds:
                    os.close(fd)
                if not data:
                    break
                region, granted = struct.unpack_from("<QB", data)
                out.append((region, bool(granted), len(fds)))
        except ConnectionError:
            pass  # (hung up on)
    return out


def test_a_key_of_the_session_is_granted_and_another_sessions_is_not(
    target: tuple[TransferEngine, int, str],
) -> None:
    engine, region, socket_name = target
    ours, theirs = open_session(engine.name), open_session(engine.name)
    assert ours["keys"][region] != theirs["keys"][region]
    granted = _grants(socket_name, _request(ours, [(region, ours["keys"][region])]), 2)
    assert granted[0][:2] == (0, True)  # the pin table
    assert granted[1] == (region, True, 1)  # its memfd
    refused = _grants(socket_name, _request(ours, [(region, theirs["keys"][region])]), 2)
    assert refused[1] == (region, False, 0)


def test_a_request_without_the_sessions_proof_is_not_answered(
    target: tuple[TransferEngine, int, str],
) -> None:
    engine, region, socket_name = target
    session = open_session(engine.name)
    forged = _request(session, [(region, session["keys"][region])], proof=bytes(32))
    assert _grants(socket_name, forged, 2) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to ask as another user")
def test_a_process_of_another_user_is_not_answered(target: tuple[TransferEngine, int, str]) -> None:
    engine, region, socket_name = target
    session = open_session(engine.name)
    request = _request(session, [(region, session["keys"][region])])
    child = os.fork()
    if child == 0:  # (only sockets and _exit here: safe in a forked threaded process)
        code = 3
        try:
            os.setuid(65534)
            code = 0 if _grants(socket_name, request, 2) == [] else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
