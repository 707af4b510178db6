"""A raw connection to a master that passed the authentication, for tests that write frames by hand (a
peer that misbehaves on purpose): it seals whole frames with the connection's MAC (kvstore.rpc.frame_mac)
as a client does, and opens replies."""

from __future__ import annotations

import socket
from typing import Any

from kvstore import rpc
from kvstore.rpc import auth


class MasterWire:
    def __init__(self, address: str, secret: bytes, timeout: float = 5.0) -> None:
        host, port = rpc.parse_address(address)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.frames = auth.client_handshake(self.sock, secret, address)
        self.tag = auth.TAG_SIZE if self.frames is not None else 0

    def seal(self, frame: bytes) -> bytes:
        """`frame` as the next frame this side sends (each sealed frame must go, in the order sealed)."""
        return frame if self.frames is None else self.frames.seal(frame)

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(self.seal(f) for f in frames))

    def reply(self) -> Any:
        """The next reply, decoded; None when the master closed the connection first."""
        header = self._recv_exact(rpc.HEADER_SIZE)
        if header is None:
            return None
        rest = self._recv_exact(rpc.frame_length(header) + self.tag)
        if rest is None:
            return None
        return rpc.unpack(rest if self.frames is None else self.frames.open(header, rest))

    def _recv_exact(self, n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> MasterWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
