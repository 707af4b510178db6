"""A peer that speaks the tcp transport's wire protocol by hand, as a hostile or buggy peer would: after
a handshake session of its own (`open_session`: the engine core's handshake), it proves that session on a
data connection (`RawPeer.authenticate`) and then sends whatever frames a test wants."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
from typing import Any

from transfer_engine import _core, _tools
from transfer_engine.security import EngineSecurity

HELLO, HELLO_ACK, READ, READ_DATA, WRITE, WRITE_ACK, ERROR, PROOF, PROOF_ACK = range(1, 10)
NONCE = 32


def open_session(name: str) -> dict[str, Any]:
    """A handshake with the engine at `name` under this process's cluster secret: {engine_id, session_id,
    session_key, keys: {region id: its key in this session}}."""
    return _core.open_session(name, 5000, EngineSecurity.load().secret())


def _prove(key: bytes, label: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(key, label + first + second, hashlib.sha256).digest()


class RawPeer:
    def __init__(self, address: str, timeout: float = 5.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)

    def authenticate(self, session: dict[str, Any], key: bytes | None = None) -> dict:
        """The connection's challenge-response for `session` (proving `key`, the session's by default);
        returns the target's answer to the proof (PROOF_ACK, or ERROR when refused)."""
        key = session["session_key"] if key is None else key
        ours = os.urandom(NONCE)
        payload = session["session_id"] + ours
        self.send(_tools.encode_frame_header(HELLO, length=len(payload)) + payload)
        ack = self.recv_header()
        assert ack["opcode"] == HELLO_ACK, ack
        body = self.recv_exact(ack["length"])
        assert int.from_bytes(body[:8], "little") == session["engine_id"]
        theirs, claimed = body[8 : 8 + NONCE], body[8 + NONCE :]
        assert hmac.compare_digest(claimed, _prove(session["session_key"], b"tcp target", ours, theirs))
        proof = _prove(key, b"tcp initiator", theirs, ours)
        self.send(_tools.encode_frame_header(PROOF, length=len(proof)) + proof)
        return self.recv_header()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def recv_header(self) -> dict:
        return _tools.decode_frame_header(self.recv_exact(_tools.FRAME_HEADER_SIZE))

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
