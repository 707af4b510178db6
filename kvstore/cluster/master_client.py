"""A thread-safe RPC client for the master. Each thread gets its own connection and waits for its own
reply on it: no reader thread, no hand-off between threads, so a call costs one round trip and no
extra wake-ups (which take tens of microseconds on a VM)."""

from __future__ import annotations

import contextlib
import functools
import itertools
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from kvstore import rpc
from kvstore.cluster.leader import AddressList, Locator
from kvstore.config.security import SecurityConfig
from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    MasterUnavailableError,
    PermissionDeniedError,
    error_for_code,
)
from kvstore.rpc import tls
from kvstore.rpc.auth import TAG_SIZE, FrameMac, client_handshake
from kvstore.rpc.messages import OWN_NAME, PROTOCOL_VERSION, Hello, HelloReply, Request

CONNECT_SECONDS = 1.0
"""How long a connection may take to open: a master that is down on a host that is cut off never refuses,
and a client must not wait its whole reply timeout on it before asking for the new leader."""


class Sent(NamedTuple):
    """A request a thread sent on its connection, its reply not yet received (MasterClient.send)."""

    msg_id: int
    request: Request
    sock: socket.socket


class _Wire:
    """A connection's frame MACs (kvstore.rpc.frame_mac), or none: sealing and opening its frames in the
    order of the stream (a connection is one thread's)."""

    __slots__ = ("frames", "tag")

    def __init__(self, frames: FrameMac | None) -> None:
        self.frames = frames
        self.tag = TAG_SIZE if frames is not None else 0

    def seal(self, frame: bytes) -> bytes:
        return frame if self.frames is None else self.frames.seal(frame)


class MasterClient:
    def __init__(
        self,
        address: str | Locator,
        timeout: float = 10.0,
        busy_poll_us: int = 100,
        secret: bytes | None = None,
        tls_context: ssl.SSLContext | Literal["env"] | None = "env",
        shard: tuple[int, int] | None = None,
    ) -> None:
        """`address`: HOST:PORT, a comma-separated list of them (the one that accepts: a leader), or a
        Locator (kvstore.cluster.leader: the leader etcd names). Each connection opened asks it again.
        `secret`: the cluster secret each connection proves it knows (from the environment if None).
        `tls_context`: TLS to the master (kvstore.rpc.tls; "env": from KVSTORE_TLS_*; None: plain TCP).
        `shard`: (shard, shards) this client routes to the master (kvstore.cluster.shards): a master that
        says it serves another part of the key space is refused (None: not checked, as status does)."""
        security = SecurityConfig.load()
        self.secret = security.secret() if secret is None else secret
        self.tls = tls.client_context(security) if tls_context == "env" else tls_context
        self.locator = address if isinstance(address, Locator) else AddressList(address)
        self.address = self.locator.describe()  # the master last connected to, once there is one
        self.timeout = timeout
        # A reply usually comes back within ~100 µs; polling for it that long saves a sleep and wake-up.
        # 0 for a master in this process: it needs the GIL the poll loop holds.
        self.spin_seconds = busy_poll_us * 1e-6
        self.epoch = 0  # the highest leader epoch seen: an older leader (deposed) is never followed
        self._ids = itertools.count(1)
        self._local = threading.local()
        self._all: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._identity: tuple[str, str] | None = None  # (client id, token): see identify()
        self.shard = shard

    def call(
        self, request: Request, timeout: float | None = None, long_poll: bool = False, raw: bool = False
    ) -> Any:
        """Sends one typed request and returns its decoded reply; raises the store error for a non-zero
        code. `long_poll`: the master answers when it has something to say, not at once, so polling for
        the reply would only burn a core the master and the other processes need. `raw`: the reply as
        msgpack decoded it, not checked nor made typed records (a load generator that only counts)."""
        return self.receive(self.send(request), timeout, long_poll, raw)

    def send(self, request: Request) -> Sent:
        """Sends one request without waiting for its reply (receive() takes it): with several requests out
        on its connection, a thread works while the master answers (the master answers a connection's
        requests in turn, but a reply that waits, e.g. a put end's, lets later ones overtake it)."""
        identity = self._identity
        if identity and request.__class__ in OWN_NAME and getattr(request, "client_id", None) == identity[0]:
            request.token = request.token or identity[1]  # type: ignore[attr-defined]
        msg_id = next(self._ids)
        sock, _poller = self._connection()
        wire: _Wire = self._local.wire
        frame = wire.seal(rpc.pack([msg_id, request.METHOD, request.params()]))
        out: dict[int, Any] = self._local.out
        try:
            if out:  # replies may be on their way: read them as they come, or both sides could wait
                _send_reading(sock, wire, frame, self.timeout, functools.partial(self._stash, out))
            else:
                sock.sendall(frame)
        except (OSError, EOFError, InvalidArgumentError, MasterUnavailableError) as exc:
            self._drop(sock)
            raise MasterUnavailableError(f"master {self.address}: {request.METHOD}: {exc}") from exc
        out[msg_id] = None
        return Sent(msg_id, request, sock)

    def _stash(self, out: dict[int, Any], reply: tuple[int, int, str, Any]) -> None:
        """Keeps a reply read on the way for the receive() of its request."""
        if out.get(reply[0], True) is not None:  # not a request of ours still out
            raise MasterUnavailableError(f"master {self.address} answered out of turn")
        out[reply[0]] = reply

    def receive(
        self, sent: Sent, timeout: float | None = None, long_poll: bool = False, raw: bool = False
    ) -> Any:
        """The reply to a request this thread sent (see call for the arguments); replies to its other
        requests that come first are kept for their own receive."""
        local, method = self._local, sent.request.METHOD
        if getattr(local, "sock", None) is not sent.sock or sent.msg_id not in local.out:
            raise MasterUnavailableError(f"master {self.address}: {method}: the connection was lost")
        reply = local.out[sent.msg_id]
        records = None  # the reply's records, when read from its frame in C++ (Request.decode_frame)
        try:
            while reply is None:
                sent.sock.settimeout(timeout or self.timeout)
                if self.spin_seconds and not long_poll:
                    _spin_until_readable(local.poller, self.spin_seconds)
                body = _read_body(sent.sock, local.wire)
                records = None if raw else sent.request.decode_frame(sent.msg_id, body)
                if records is not None:
                    break
                reply = rpc.parse_response(rpc.unpack(body))
                if reply[0] != sent.msg_id:
                    self._stash(local.out, reply)
                    reply = None
        except (OSError, EOFError, InvalidArgumentError) as exc:
            self._drop(sent.sock)
            kind = "timed out" if isinstance(exc, socket.timeout) else str(exc)
            raise MasterUnavailableError(f"master {self.address}: {method}: {kind}") from exc
        except MasterUnavailableError:
            self._drop(sent.sock)
            raise
        del local.out[sent.msg_id]
        if records is not None:
            return records
        _, code, message, result = reply
        if code:
            raise error_for_code(code, message)
        return result if raw else sent.request.decode_reply(result)

    def abandon(self, sent: list[Sent]) -> None:
        """Requests whose replies this thread will not receive (it gave up on them: an error elsewhere):
        their connection is closed if any is still out, so no later call reads a stale reply."""
        local = self._local
        for s in sent:
            if getattr(local, "sock", None) is s.sock and s.msg_id in local.out:
                self._drop(s.sock)
                return

    def identify(self, client_id: str, token: str) -> None:
        """Requests made in `client_id`'s name carry `token` from now on (kvstore.rpc.messages.OWN_NAME)."""
        self._identity = (client_id, token)

    def hello(self) -> None:
        """Checks the master answers and speaks this client's protocol version (a clear error if not):
        every connection opens with it."""
        self._connection()

    def close_this_threads_connection(self) -> None:
        """Closes the calling thread's connection (its next call opens another): a thread done calling
        for a long while (a node's joining thread, until it leaves) would hold one that the master
        cuts as idle, with a WARNING, and that sits in CLOSE_WAIT here."""
        sock = getattr(self._local, "sock", None)
        if sock is not None and not self._local.out:
            self._drop(sock)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._all = self._all, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
        self.locator.close()

    def _connection(self) -> tuple[socket.socket, select.poll]:
        """This thread's connection and a poller registered on it (made once per connection)."""
        sock: socket.socket | None = getattr(self._local, "sock", None)
        if sock is not None:
            # (With requests out, the connection is in use: a closed one fails their receive. Peeking
            # would also take a byte of a reply through TLS.)
            if self._local.out or not _closed_by_peer(sock, self._local.poller):
                return sock, self._local.poller
            self._drop(sock)  # the master went away since the last call (e.g. restarted): reconnect
        with self._lock:
            if self._closed:
                raise MasterUnavailableError("master client is closed")
        failures = []
        for address in self.locator.candidates():
            try:
                sock, wire = self._open(address)
            except MasterUnavailableError as exc:
                failures.append(str(exc))
                continue
            self.locator.connected(address)
            self.address = address
            with self._lock:
                self._all.append(sock)
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            self._local.sock, self._local.poller, self._local.wire = sock, poller, wire
            self._local.out = {}  # id of each request out on it -> its reply, once read (else None)
            return sock, poller
        raise MasterUnavailableError(f"cannot reach {self.locator.describe()}: " + "; ".join(failures))

    def _open(self, address: str) -> tuple[socket.socket, _Wire]:
        """A connection to `address` that opened with Hello: the same protocol, a leader no older than
        one already seen. Its frames carry MACs unless it is TLS (which protects them already)."""
        host, port = rpc.parse_address(address)
        try:
            sock = socket.create_connection((host, port), timeout=min(self.timeout, CONNECT_SECONDS))
        except OSError as exc:
            raise MasterUnavailableError(f"cannot reach master {address}: {exc}") from exc
        try:
            sock.settimeout(self.timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                try:
                    sock = self.tls.wrap_socket(sock, server_hostname=host)
                except ssl.SSLError as exc:  # (an OSError: said as TLS's, not a lost master)
                    sock.close()
                    raise PermissionDeniedError(f"master {address}: TLS: {exc}") from exc
            wire = _Wire(client_handshake(sock, self.secret, address, frames=self.tls is None))
            _, code, message, result = _exchange(sock, wire, 0, Hello(PROTOCOL_VERSION))
            if code:
                raise error_for_code(code, message)
            reply: HelloReply = Hello.decode_reply(result)
        except PermissionDeniedError:  # (an OSError too: the secrets differ, and it says so)
            sock.close()
            raise
        except (OSError, EOFError, rpc.FrameError) as exc:  # not a master that speaks our framing
            sock.close()
            hint = "" if self.tls is not None else " (a master that serves TLS needs KVSTORE_TLS_CA here)"
            raise MasterUnavailableError(f"master {address}: hello: {exc}{hint}") from exc
        except KVStoreError:
            sock.close()
            raise
        if self.shard is not None and (reply.shard, reply.shards) != self.shard:
            sock.close()
            raise InvalidArgumentError(_shard_mismatch(address, self.shard, reply))
        if 0 < reply.epoch < self.epoch:
            sock.close()
            raise MasterUnavailableError(
                f"master {address} leads epoch {reply.epoch}, older than {self.epoch}"
            )
        if reply.epoch > self.epoch:
            self._abandon_older()
            self.epoch = reply.epoch
        return sock, wire

    def _abandon_older(self) -> None:
        """A newer leader answered: the other threads' connections lead to the deposed one. Shut down,
        a call waiting on one (a node's parked work poll) fails at once and its next call follows the
        new leader, instead of waiting out its timeout on a master that is cut off and never answers."""
        with self._lock:
            socks = list(self._all)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _drop(self, sock: socket.socket) -> None:
        """A connection that failed mid-call is out of step: close it; the next call reconnects."""
        self._local.sock = None
        self._local.out = {}
        with self._lock:
            if sock in self._all:
                self._all.remove(sock)
        with contextlib.suppress(OSError):
            sock.close()


def _shard_mismatch(address: str, routed: tuple[int, int], reply: HelloReply) -> str:
    """Why a master is refused: this client would send it keys of a shard it does not serve (a put
    stored where other clients never look, two values for one key)."""
    return (
        f"master {address} serves shard {reply.shard} of {reply.shards}, but this client's master setting "
        f"routes shard {routed[0]} of {routed[1]} to it: give every client and node the masters' list in "
        "shard order, each shard's addresses ','-separated and the shards ';'-separated (or the etcd "
        "cluster the masters elect in)"
    )


def _exchange(sock: socket.socket, wire: _Wire, msg_id: int, request: Request) -> tuple[int, int, str, Any]:
    """Sends one request frame and reads its reply frame: (id, code, message, result)."""
    sock.sendall(wire.seal(rpc.pack([msg_id, request.METHOD, request.params()])))
    return _read_reply(sock, wire)


def _send_reading(
    sock: socket.socket,
    wire: _Wire,
    frame: bytes,
    timeout: float,
    keep: Callable[[tuple[int, int, str, Any]], None],
) -> None:
    """sendall that reads (and hands `keep`) each reply that arrives meanwhile. The master stops reading
    a connection whose replies pile up unread (back-pressure), so a client that only wrote while a large
    reply came could wait on it forever, as it waits on the client. `timeout`: for any one step."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLOUT)
    view = memoryview(frame)
    while view:
        pending = isinstance(sock, ssl.SSLSocket) and sock.pending() > 0  # (read through TLS already)
        events = 0 if pending else (poller.poll(int(timeout * 1000)) or [(0, -1)])[0][1]
        if events == -1:
            raise TimeoutError("timed out")
        if pending or events & select.POLLIN:
            keep(_read_reply(sock, wire))
        elif events & select.POLLOUT:
            view = view[sock.send(view) :]
        else:  # POLLERR / POLLHUP alone
            raise ConnectionError("the connection failed")


def _read_reply(sock: socket.socket, wire: _Wire) -> tuple[int, int, str, Any]:
    """The next reply frame on the connection: (id, code, message, result)."""
    return rpc.parse_response(rpc.unpack(_read_body(sock, wire)))


def _read_body(sock: socket.socket, wire: _Wire) -> bytes | bytearray | memoryview:
    """The next reply frame's body (its msgpack); a frame whose MAC does not verify raises FrameMacError
    (an InvalidArgumentError: the connection is dropped)."""
    header = _recv_exact(sock, rpc.HEADER_SIZE)
    rest = _recv_exact(sock, rpc.frame_length(header) + wire.tag)
    return rest if wire.frames is None else wire.frames.open(header, rest)


def _closed_by_peer(sock: socket.socket, poller: select.poll) -> bool:
    """True when the peer has closed an idle connection: nothing is owed on it between calls, so a
    readable socket means EOF (or an error). A zero-timeout poll first: a socket with a timeout would
    otherwise wait for data in recv, MSG_DONTWAIT or not."""
    try:
        if not poller.poll(0):
            return False
        if isinstance(sock, ssl.SSLSocket):  # (no peeking through TLS: nothing is owed, so any byte is out
            timeout = sock.gettimeout()  # of step: EOF, a close_notify or not, ends the connection)
            sock.setblocking(False)
            try:
                sock.recv(1)
            except ssl.SSLWantReadError:
                return False  # (a TLS record that carried no data, e.g. a session ticket)
            finally:
                sock.settimeout(timeout)
            return True
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except OSError:
        return True


def _spin_until_readable(poller: select.poll, seconds: float) -> None:
    """Polls (without sleeping) until the reply starts to arrive or `seconds` pass. A zero-timeout
    poll: a recv on a socket with a timeout would sleep in the kernel instead of spinning."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if poller.poll(0):
            return


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise EOFError("master closed the connection")
        got += k
    return buf  # msgpack and struct read a bytearray as it is: no copy
