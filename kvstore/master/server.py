"""The master process: msgpack RPC over TCP, /metrics and /health over HTTP, and a background loop
for heartbeat expiry, abandoned puts and watermark eviction. One asyncio loop owns all state."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from kvstore import rpc
from kvstore.config.master import MasterConfig
from kvstore.errors import InternalError, KVStoreError, TooManyConnectionsError
from kvstore.limited_log import LimitedLog
from kvstore.master.busy_poll import BusyPoll
from kvstore.master.election import Election
from kvstore.master.handlers import Deferred, Handlers
from kvstore.master.kv_events import StoreEvents, check_endpoint
from kvstore.master.loop_watch import LoopTurns, LoopWatch
from kvstore.master.metrics import MasterMetrics
from kvstore.master.mount_check import MountCheck
from kvstore.master.path_reports import PathReports
from kvstore.master.state import MasterState
from kvstore.master.status import RateWindow, cluster_status
from kvstore.rpc import auth, tls
from kvstore.rpc.messages import REQUESTS
from transfer_engine.security import SecurityConfig

log = logging.getLogger("kvstore.master")
REPLY_FLUSH = 256 << 10  # replies written out at least this often while a read's requests are answered
MOUNT_CHECK_SECONDS = 5.0  # a mount's check (the engine's handshake) gives up after this


class Master:
    """An RPC master. `await start()` in a loop, or `Master.start_in_thread()` for an embedded one."""

    def __init__(
        self,
        config: MasterConfig | None = None,
        *,
        epoch: int = 0,
        sock: socket.socket | None = None,
        election: Election | None = None,
        security: SecurityConfig | None = None,
    ) -> None:
        """`epoch`, `election`: this master leads its cluster (kvstore.master.election) in that term;
        `sock`: the RPC socket, bound already (a candidate holds its address while it waits to lead);
        `security`: the cluster secret every connection proves it knows (from the environment if None)."""
        self.config = config or MasterConfig.load()
        self.security = security or SecurityConfig.load()
        self.security.check_listen(self.config.host, "the master")
        self.secret = self.security.secret()
        self.tls = tls.server_context(self.security)  # None: plain TCP
        self.state = MasterState(self.config)
        self.rates = RateWindow()
        self.started = time.monotonic()
        self.epoch, self.election, self._sock = epoch, election, sock
        self.watch = LoopWatch()  # how long the loop is held (its turns, each periodic or scrape task)
        self.paths = PathReports(self.config.client_ttl)  # the clients' NIC paths, for /metrics
        self.events: StoreEvents | None = None
        if self.config.kv_events_endpoint:
            events = self.config.kv_events_endpoint
            check_endpoint(events, self.security.insecure, self.config.kv_events_tcp)
            self.events = StoreEvents(
                self.state.ledger, self.config.kv_events_endpoint, self.config.kv_events_backend
            )
        self.handlers = Handlers(self.state, self.describe, epoch, self.watch, self.paths)
        self.connections: set[_RpcProtocol] = set()
        # Connections still proving the secret, oldest first (evicted past max_unauthenticated), and the
        # authenticated ones per peer host (refused past max_connections_per_peer).
        self.unauthenticated: dict[_RpcProtocol, None] = {}
        self.per_peer: collections.Counter[str] = collections.Counter()
        self.buffered = 0  # bytes of request frames still arriving, over all connections (max_buffered)
        self.refusals = _Refusals()
        self.metrics = MasterMetrics(self.state, self.watch, self.paths)
        self._servers: list[asyncio.base_events.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._ready: list[Callable[[], None]] = []  # deferred replies ready to send (run_ready)
        self._ready_scheduled = False
        self.address = ""
        self.http_address: str | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if isinstance(loop, MasterLoop):
            self.watch.turns = loop.turns
        if self.config.verify_mounts:
            self.handlers.mounts = MountCheck(loop, self.secret, MOUNT_CHECK_SECONDS)
        if self._sock is not None:
            rpc_server = await loop.create_server(lambda: _RpcProtocol(self), sock=self._sock, ssl=self.tls)
        else:
            rpc_server = await loop.create_server(
                lambda: _RpcProtocol(self), self.config.host, self.config.port, ssl=self.tls
            )
        self._servers.append(rpc_server)
        self.address = _address(rpc_server)
        if self.config.http_port is not None:
            http_server = await asyncio.start_server(
                self._serve_http, self.config.host, self.config.http_port
            )
            self._servers.append(http_server)
            self.http_address = _address(http_server)
        self._tasks.append(asyncio.create_task(self._housekeeping()))

    async def stop(self) -> None:
        """Stops serving: no new connection, and every open one closed (a leader stepping down must
        change nothing more)."""
        for task in self._tasks:
            task.cancel()
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.handlers.mounts is not None:
            self.handlers.mounts.close()
        if self.events is not None:
            self.events.close()
            self.events = None

    async def serve_forever(self) -> None:
        await self.start()
        await asyncio.gather(*(s.serve_forever() for s in self._servers))

    # -- RPC -----------------------------------------------------------------------------------------
    def when_ready(self, send: Callable[[], None]) -> None:
        """Sends a deferred reply that became ready: before the replies of the requests that made it
        ready are written (run_ready), else on the next loop turn."""
        self._ready.append(send)
        if not self._ready_scheduled:
            self._ready_scheduled = True
            asyncio.get_running_loop().call_soon(self.run_ready)

    def run_ready(self) -> None:
        """Sends every deferred reply that is ready. A connection runs this before writing its own
        replies, so what a node is told a request did (the replicas it now holds, the kills to apply)
        is on its way before the requester hears it is done: a master killed after acknowledging a put
        has already told the put's nodes, which name the object to the next master."""
        self._ready_scheduled = False
        while self._ready:
            ready, self._ready = self._ready, []
            for send in ready:
                send()

    def _dispatch(self, msg_id: int, method: str, params: dict[str, Any]) -> list[Any] | Deferred:
        start = time.perf_counter()
        try:
            result = self.handlers.handle(method, params)
            if isinstance(result, Deferred):
                return result
            return [msg_id, 0, "", result]
        except KVStoreError as exc:
            return [msg_id, exc.code, str(exc), None]
        except Exception as exc:  # a bug must cost one request, not the master
            log.exception("RPC %s failed", method)
            return [msg_id, InternalError.code, f"internal error: {type(exc).__name__}", None]
        finally:
            label = method if method in REQUESTS else "unknown"  # peers must not grow the label set
            self.metrics.rpc_seconds.labels(label).observe(time.perf_counter() - start)

    def authentication(self) -> str:
        """How connections are admitted, as `kvstore status` and the start-up line say it."""
        if self.secret:
            how = "cluster secret"
        else:
            how = "none (insecure)" if self.security.insecure else "none (loopback only)"
        return how if self.tls is None else f"{how}; TLS {tls.describe(self.tls)}"

    def describe(self) -> dict[str, Any]:
        """The cluster as this master sees it (`kvstore status`)."""
        status = cluster_status(self.state, self.rates, self.address, self.started)
        status["master"]["authentication"] = self.authentication()
        if self.election is not None:
            status["master"].update(role="leader", epoch=self.epoch, cluster=self.election.cluster)
            status["standbys"] = list(self.election.standbys)
        return status

    # -- HTTP ----------------------------------------------------------------------------------------
    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            parts = request.split(b"\r\n", 1)[0].split()
            path = parts[1].decode(errors="replace") if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] != b"GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                with self.watch.timed("scrape_metrics"):
                    body = generate_latest(self.metrics.registry)
                status, ctype = "200 OK", CONTENT_TYPE_LATEST
            elif path == "/health":
                with self.watch.timed("scrape_health"):
                    stats = self.state.stats()
                health = {
                    "status": "degraded" if stats["disks_degraded"] else "ok",
                    **{k: stats[k] for k in ("objects", "segments", "clients", "usage", "disks_degraded")},
                }
                status, ctype, body = "200 OK", "application/json", json.dumps(health).encode()
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
            await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            asyncio.TimeoutError,
            ConnectionError,
        ):
            pass
        finally:
            writer.close()

    # -- time ----------------------------------------------------------------------------------------
    async def _housekeeping(self) -> None:
        period = min(0.5, self.config.heartbeat_interval / 2)
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            stalled = now - last - period
            last = now
            try:
                if stalled > period:  # the loop itself did not run: that silence is not the clients'
                    self.state.credit_stall(stalled)
                    continue  # read what queued up meanwhile before judging anyone
                timed, state = self.watch.timed, self.state
                with timed("expire"):
                    state.expire()
                with timed("rates"):
                    self.rates.sample(state.clock(), vars(state.counters))
                with timed("demotion_plan"):
                    state.plan_demotions()
                with timed("evict_to_watermark"):
                    state.evict_to_watermark()
                with timed("replication_plan"):
                    state.replicator.plan()
            except Exception:
                log.exception("housekeeping failed")

    # -- embedding -----------------------------------------------------------------------------------
    @classmethod
    def start_in_thread(
        cls, config: MasterConfig | None = None, security: SecurityConfig | None = None
    ) -> EmbeddedMaster:
        """A master in a thread of this process, on a free port unless `config` names one."""
        return EmbeddedMaster(cls(config or MasterConfig.load(port=0), security=security))


class EmbeddedMaster:
    """A master running on its own event loop in a daemon thread of this process."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self.loop = new_event_loop(master.config.busy_poll_us)
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(master.start())
            except BaseException as exc:
                failure.append(exc)
                started.set()
                return
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name="kvstore-master", daemon=True)
        self.thread.start()
        started.wait()
        if failure:
            raise failure[0]

    @property
    def address(self) -> str:
        return self.master.address

    def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if not self.loop.is_closed() and self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(self.master.stop(), self.loop).result(timeout=10)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


class _Refusals:
    """Connections refused or cut, logged a line a second per cause (kvstore.limited_log)."""

    def __init__(self) -> None:
        self._log = LimitedLog(log)

    def warn(self, what: str, peer: str, why: str) -> None:
        self._log.warn(why, f"{what} a connection from {peer}: {why}")


class _RpcProtocol(asyncio.Protocol):
    """One connection: frames are parsed as bytes arrive and answered in order, with no coroutine per
    message (the state is only touched from this loop, so handlers run inline)."""

    def __init__(self, master: Master) -> None:
        self.master = master
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        # None once it proved itself; frames MACed unless the connection is TLS (which protects them)
        self.handshake: auth.ServerHandshake | None = auth.ServerHandshake(master.secret, master.tls is None)
        self.frames: auth.FrameMac | None = None  # each frame's MAC, both ways (with a secret: auth)
        self.tag = 0  # bytes of a frame's MAC
        self.auth_timer: asyncio.TimerHandle | None = None
        self.peer = self.host = "?"
        self.counted = False  # in master.per_peer
        self.frame_timer: asyncio.TimerHandle | None = None  # runs while a frame is half-arrived
        self.held = 0  # bytes of it buffered (in master.buffered)
        self.writing_paused = False  # the peer does not read its replies: no more are made meanwhile

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) and peer else self.peer
        self.master.connections.add(self)
        loop = asyncio.get_running_loop()
        self.auth_timer = loop.call_later(auth.TIMEOUT_SECONDS, self._refuse, "did not authenticate in time")
        waiting = self.master.unauthenticated
        waiting[self] = None
        if len(waiting) > self.master.config.max_unauthenticated:
            oldest = next(iter(waiting))
            oldest._refuse("evicted: too many connections waiting to authenticate (max_unauthenticated)")

    def connection_lost(self, exc: Exception | None) -> None:
        self._hold(0)
        self.master.connections.discard(self)
        self.master.unauthenticated.pop(self, None)
        if self.counted:
            self.master.per_peer[self.host] -= 1
            if self.master.per_peer[self.host] <= 0:
                del self.master.per_peer[self.host]
        if self.auth_timer is not None:
            self.auth_timer.cancel()

    def _refuse(self, why: str) -> None:
        self.master.unauthenticated.pop(self, None)
        if self.handshake is None or self.transport is None or self.transport.is_closing():
            return
        self.master.refusals.warn("refused", self.peer, why)
        self.transport.abort()  # nothing it sent is read

    def _authenticate(self, data: bytes) -> bytes:
        """Feeds the handshake; the bytes past it once the peer proved itself (b"" until then)."""
        assert self.handshake is not None and self.transport is not None
        try:
            reply = self.handshake.feed(data)
        except KVStoreError as exc:
            self._refuse(str(exc))
            return b""
        if reply:
            self.transport.write(reply)
        if not self.handshake.done:
            return b""
        self.frames = self.handshake.frame_mac()
        self.tag = auth.TAG_SIZE if self.frames is not None else 0
        rest, self.handshake = self.handshake.rest(), None
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        self.master.unauthenticated.pop(self, None)
        limit = self.master.config.max_connections_per_peer
        if self.master.per_peer[self.host] >= limit:
            self.master.refusals.warn("refused", self.peer, f"{limit} connections from that host already")
            error = TooManyConnectionsError(
                f"the master holds {limit} connections from {self.host} already (max_connections_per_peer)"
            )
            self._write([rpc.pack([0, error.code, str(error), None])])
            self.transport.close()
            return b""
        self.master.per_peer[self.host] += 1
        self.counted = True
        return rest

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        if self.handshake is not None:
            data = self._authenticate(data)
            if not data:
                return
        self.buffer += data
        self._serve_buffer()

    def _serve_buffer(self) -> None:
        assert self.transport is not None
        replies: list[bytes] = []
        answered = self._answer(replies)
        self.master.run_ready()
        if replies:
            self._write(replies)
        if not self.transport.is_closing():
            self._hold(len(self.buffer), answered)

    def _hold(self, pending: int, progressed: bool = False) -> None:
        """`pending` bytes of a frame still arriving stay buffered: counted against max_buffered (cut past
        it), and given frame_timeout from the last whole frame to complete."""
        master, config = self.master, self.master.config
        master.buffered += pending - self.held
        self.held = pending
        if (pending == 0 or progressed) and self.frame_timer is not None:
            self.frame_timer.cancel()
            self.frame_timer = None
        if pending == 0:
            return
        if master.buffered > config.max_buffered:
            self._cut(f"the master holds {config.max_buffered} bytes of frames still arriving (max_buffered)")
        elif self.frame_timer is None:
            why = f"a request frame was not whole within {config.frame_timeout} s (frame_timeout)"
            self.frame_timer = asyncio.get_running_loop().call_later(config.frame_timeout, self._cut, why)

    def _write(self, frames: list[bytes]) -> None:
        """Writes whole frames, each sealed with its MAC here: in the order they go out, which is the
        order their sequence numbers must follow (a deferred reply may go out between two batches)."""
        assert self.transport is not None
        if self.frames is not None:
            seal = self.frames.seal
            frames = [seal(f) for f in frames]
        self.transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _cut(self, why: str) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.master.refusals.warn("cut", self.peer, why)
            self.transport.abort()
        self.buffer = bytearray()
        self._hold(0)

    # Back-pressure: a peer that does not read its replies is not read from either (asyncio's transport
    # calls these around its write buffer's high-water mark), so its replies never pile up here.
    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
            if self.buffer:  # frames that arrived with the last read and waited
                asyncio.get_running_loop().call_soon(self._serve_buffer)

    def _answer(self, replies: list[bytes]) -> bool:
        """Answers every whole frame in the buffer (into `replies`; deferred ones later); whether there
        was one."""
        assert self.transport is not None
        answered = False
        pending = 0  # bytes in `replies`: written out every REPLY_FLUSH, so a full write buffer stops us
        while len(self.buffer) >= rpc.HEADER_SIZE and not self.writing_paused:
            try:
                n = rpc.frame_length(bytes(self.buffer[: rpc.HEADER_SIZE]))
                end = rpc.HEADER_SIZE + n
                if len(self.buffer) < end + self.tag:
                    break
                if self.frames is not None:
                    with memoryview(self.buffer) as view:
                        self.frames.verify(
                            view[: rpc.HEADER_SIZE], view[rpc.HEADER_SIZE : end], view[end:][: self.tag]
                        )
                body = bytes(self.buffer[rpc.HEADER_SIZE : end])
                del self.buffer[: end + self.tag]
                msg_id, method, params = rpc.parse_request(rpc.unpack(body))
            except auth.FrameMacError as exc:
                if replies:
                    self._write(replies)  # (the frames before it verified)
                    replies.clear()
                self._cut(str(exc))  # nothing of it is done, nor answered: the stream is not the client's
                return answered
            except rpc.FrameError as exc:
                replies.append(rpc.pack([0, exc.code, str(exc), None]))
                self._write(replies)
                replies.clear()
                self.transport.close()  # the stream cannot be trusted any more
                self.buffer.clear()
                return answered
            answered = True
            reply = self.master._dispatch(msg_id, method, params)
            if isinstance(reply, Deferred):
                self._later(msg_id, reply)
            else:
                replies.append(rpc.pack(reply))
                pending += len(replies[-1])
                if pending >= REPLY_FLUSH:
                    self._write(replies)  # (may pause writing: see pause_writing)
                    replies.clear()
                    pending = 0
        return answered

    def _later(self, msg_id: int, deferred: Deferred) -> None:
        """Sends a deferred reply when it is ready (once the requests that made it so are done: one
        operation's effects are all in it; Master.run_ready) or when its time is up. Clients wait for
        each reply, so order is kept."""
        loop = asyncio.get_running_loop()
        sent = False

        def send() -> None:
            nonlocal sent
            if sent:
                return
            sent = True
            timer.cancel()
            if self.transport is None or self.transport.is_closing():
                return
            try:
                reply = deferred.make_reply()
                if isinstance(reply, Deferred):  # it waits for something else now
                    self._later(msg_id, reply)
                    return
                body = [msg_id, 0, "", reply]
            except KVStoreError as exc:
                body = [msg_id, exc.code, str(exc), None]
            self._write([rpc.pack(body)])

        timer = loop.call_later(deferred.timeout, send)
        deferred.on_ready(functools.partial(self.master.when_ready, send))


class _SpinningSelector(selectors.EpollSelector):
    """Polls without sleeping for a moment before blocking, while that pays (kvstore.master.busy_poll):
    clients that send their next request soon after a reply get it answered at once, rather than after
    the ~80 µs a sleeping process takes to wake on a VM."""

    def __init__(self, spin_seconds: float) -> None:
        super().__init__()
        self.busy_poll = BusyPoll(spin_seconds)
        self.turns = LoopTurns()  # each turn of the loop runs from one poll's return to the next poll

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self.turns.ended()
        try:
            return self._select(timeout)
        finally:
            self.turns.began()

    def _select(self, timeout: float | None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:  # callbacks are ready: only collect what came
            return super().select(timeout)
        began = time.perf_counter()
        ready: list[tuple[selectors.SelectorKey, int]] = []
        if self.busy_poll.worth_it():
            deadline = began + self.busy_poll.seconds
            while not ready and time.perf_counter() < deadline:
                ready = super().select(0)
        if not ready:
            ready = super().select(timeout)
        if ready:  # not a timer's timeout: a wait for a message
            self.busy_poll.waited(time.perf_counter() - began)
        return ready


class MasterLoop(asyncio.SelectorEventLoop):
    """The master's event loop: polls briefly before sleeping, and times its turns (_SpinningSelector)."""

    def __init__(self, busy_poll_us: int = 0) -> None:
        selector = _SpinningSelector(busy_poll_us * 1e-6)
        super().__init__(selector)
        self.turns = selector.turns


def new_event_loop(busy_poll_us: int = 0) -> asyncio.AbstractEventLoop:
    return MasterLoop(busy_poll_us)


def _address(server: asyncio.base_events.Server) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
