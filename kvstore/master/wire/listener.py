"""The master's accept loops (RPC and HTTP), in place of asyncio's: a process out of file descriptors is
a state to wait out, not an error per connection.

asyncio's own loop, on EMFILE, logged a traceback and scheduled a retry for every one of up to `backlog`
accepts in the same turn, and each retry did the same: ~1,000 idle connections at RLIMIT_NOFILE 1,024
stopped the master and wrote 570-650 MB of tracebacks in 4.5 minutes. Here an accept that fails for want
of resources stops accepting for a while (50 ms, doubling to 1 s while it goes on) and says so at most
once a second, without a traceback; `admit` refuses a connection (closed at once) when the master keeps
its last descriptors for itself; TLS handshakes still running are bounded as unauthenticated sockets are
(the oldest is dropped)."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable

from kvstore.errors import AddressInUseError, HostNotUsableError
from kvstore.limited_log import LimitedLog

log = logging.getLogger("kvstore.master")

ACCEPTS_PER_TURN = 64  # then the loop serves the connections it has
BACKLOG = 1024
PAUSE_FIRST, PAUSE_MOST = 0.05, 1.0  # seconds accepting stops after it failed for want of resources
_OUT_OF = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def address_of(host: str, port: int) -> str:
    """HOST:PORT, an IPv6 host in brackets (as kvstore.rpc.parse_address reads it)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Listener:
    """Accepts on `sock` (bound) into `factory`'s protocols while started."""

    def __init__(
        self,
        sock: socket.socket,
        factory: Callable[[], asyncio.BaseProtocol],
        *,
        what: str,
        admit: Callable[[], bool] = lambda: True,
        full: Callable[[], bool] = lambda: False,
        tls: ssl.SSLContext | None = None,
        tls_timeout: float = 5.0,
        max_handshakes: int = 256,
    ) -> None:
        self.sock, self.factory, self.what, self.admit, self.full = sock, factory, what, admit, full
        self.tls, self.tls_timeout, self.max_handshakes = tls, tls_timeout, max_handshakes
        self.handshakes: dict[asyncio.Task[object], None] = {}  # TLS handshakes running, oldest first
        self.starting = 0  # plain sockets accepted, their protocol not started yet (each holds a descriptor)
        self.pause = PAUSE_FIRST
        self._log = LimitedLog(log)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resume: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self.sock.listen(BACKLOG)
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def close(self) -> None:
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        if self._resume is not None:
            self._resume.cancel()
        for task in list(self.handshakes):
            task.cancel()
        self.sock.close()

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return address_of(host, port)

    def _accept(self) -> None:
        assert self._loop is not None
        for _ in range(ACCEPTS_PER_TURN):
            try:
                conn, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF:
                    self._back_off(exc)
                else:
                    self._log.warn(f"accept {exc.errno}", f"{self.what}: accept failed: {exc}")
                return
            self.pause = PAUSE_FIRST
            if not self.admit():
                conn.close()  # (at once: the peer learns now, and no descriptor of the reserve stays taken)
                self._log.warn("reserve", f"{self.what}: refused a connection from {_peer(peer)}: {_RESERVE}")
                continue
            conn.setblocking(False)
            self._serve(conn)
            if self.full():  # the loop closes what admit evicted (and counts what arrived) before more
                return

    def _serve(self, conn: socket.socket) -> None:
        assert self._loop is not None
        if self.tls is None:
            task = self._loop.create_task(self._loop.connect_accepted_socket(self.factory, conn))
            self.starting += 1
            task.add_done_callback(self._started)
            return
        task = self._loop.create_task(
            self._loop.connect_accepted_socket(
                self.factory, conn, ssl=self.tls, ssl_handshake_timeout=self.tls_timeout
            )
        )
        self.handshakes[task] = None
        task.add_done_callback(self._done)
        if len(self.handshakes) > self.max_handshakes:
            next(iter(self.handshakes)).cancel()  # (the oldest: a flood never locks out a new peer)

    def _started(self, task: asyncio.Task[object]) -> None:
        self.starting -= 1
        self._done(task)

    def _done(self, task: asyncio.Task[object]) -> None:
        self.handshakes.pop(task, None)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # (a TLS handshake that failed or timed out; the socket is closed)
            self._log.warn(f"handshake {type(exc).__name__}", f"{self.what}: a connection failed: {exc!r}")

    def _back_off(self, exc: OSError) -> None:
        assert self._loop is not None
        self._loop.remove_reader(self.sock.fileno())
        self._log.warn(
            "out of resources",
            f"{self.what}: cannot accept ({errno.errorcode.get(exc.errno or 0, exc.errno)}: "
            f"{exc.strerror}); accepting again in {self.pause:g} s",
        )
        self._resume = self._loop.call_later(self.pause, self._start_again)
        self.pause = min(self.pause * 2, PAUSE_MOST)

    def _start_again(self) -> None:
        self._resume = None
        if self._loop is not None and self.sock.fileno() >= 0:
            self._loop.add_reader(self.sock.fileno(), self._accept)


_RESERVE = "the master keeps its last file descriptors for itself (RLIMIT_NOFILE)"


def _peer(peer: object) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound TCP socket for `host`:`port` (not listening yet: Listener.start)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:  # (the caller names the setting: HostNotUsableError.naming)
        raise HostNotUsableError.of(exc, host, port) or exc from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:  # (the caller names the setting: AddressInUseError.naming)
            raise AddressInUseError(host, port) from None
        raise HostNotUsableError.of(exc, host, port) or exc from None
    return sock
