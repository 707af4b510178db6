"""A thread-safe, pipelined RPC client for the master: any thread may call; replies are matched by
message id on one reader thread, so concurrent callers share one connection without waiting on
each other's round trips."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from kvstore import rpc
from kvstore.errors import InvalidArgumentError, MasterUnavailableError, error_for_code


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidArgumentError(f"master address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


class MasterClient:
    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self._host, self._port = parse_address(address)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # guards the socket's send side and the pending map
        self._pending: dict[int, tuple[socket.socket, Future[Any]]] = {}
        self._sock: socket.socket | None = None
        self._closed = False

    def call(self, method: str, timeout: float | None = None, **params: Any) -> Any:
        """Sends one request and waits for its reply; raises the store error for a non-zero code."""
        future: Future[Any] = Future()
        msg_id = next(self._ids)
        frame = rpc.pack([msg_id, method, params])
        with self._lock:
            sock = self._connected()
            self._pending[msg_id] = (sock, future)
            try:
                sock.sendall(frame)
            except OSError as exc:
                self._pending.pop(msg_id, None)
                self._broken(sock)
                raise MasterUnavailableError(f"master {self.address}: {exc}") from exc
        try:
            code, message, result = future.result(timeout=timeout or self.timeout)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(msg_id, None)
            raise MasterUnavailableError(f"master {self.address} did not answer {method} in time") from None
        if code:
            raise error_for_code(code, message)
        return result

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._sock is not None:
                self._broken(self._sock)

    def _connected(self) -> socket.socket:
        if self._closed:
            raise MasterUnavailableError("master client is closed")
        if self._sock is None:
            try:
                sock = socket.create_connection((self._host, self._port), timeout=self.timeout)
            except OSError as exc:
                raise MasterUnavailableError(f"cannot reach master {self.address}: {exc}") from exc
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
            threading.Thread(target=self._read_loop, args=(sock,), name="kvstore-rpc", daemon=True).start()
        return self._sock

    def _broken(self, sock: socket.socket) -> None:
        """Fails every pending call on a dead connection; the next call reconnects. Lock held."""
        if self._sock is sock:
            self._sock = None
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        for msg_id, (owner, future) in list(self._pending.items()):
            if owner is sock:
                del self._pending[msg_id]
                future.set_exception(MasterUnavailableError(f"connection to master {self.address} lost"))

    def _read_loop(self, sock: socket.socket) -> None:
        try:
            while True:
                header = _recv_exact(sock, rpc.HEADER_SIZE)
                body = _recv_exact(sock, rpc.frame_length(header))
                msg_id, code, message, result = rpc.parse_response(rpc.unpack(body))
                with self._lock:
                    entry = self._pending.pop(msg_id, None)
                if entry is not None:
                    entry[1].set_result((code, message, result))
        except (OSError, EOFError, InvalidArgumentError):
            with self._lock:
                self._broken(sock)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("master closed the connection")
        got += k
    return bytes(buf)
