"""The master process: msgpack RPC over TCP, /metrics and /health over HTTP, and a background loop
for heartbeat expiry, abandoned puts and watermark eviction. One asyncio loop owns all state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kvstore.config.master import MasterConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import InternalError, KVStoreError
from kvstore.limited_log import LimitedLog
from kvstore.master.service.handlers import Deferred, Handlers
from kvstore.master.service.loop_watch import LoopTurns, LoopWatch
from kvstore.master.service.mount_check import MountCheck
from kvstore.master.service.path_reports import PathReports
from kvstore.master.service.state import MasterState
from kvstore.master.wire.busy_poll import BusyPoll
from kvstore.master.wire.connection_table import ConnectionTable
from kvstore.master.wire.election import Election
from kvstore.master.wire.http_endpoint import HttpEndpoint
from kvstore.master.wire.kv_events import StoreEvents, check_endpoint
from kvstore.master.wire.listener import Listener, address_of, listening_socket
from kvstore.master.wire.metrics import MasterMetrics
from kvstore.master.wire.role import Leadership, Role
from kvstore.master.wire.rpc_connection import Refusals, RpcConnection
from kvstore.master.wire.status import RateWindow, cluster_status
from kvstore.rpc import auth, tls
from kvstore.rpc.etcd import SHARD_INFIX
from kvstore.rpc.messages import REQUESTS

log = logging.getLogger("kvstore.master")
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
        http: HttpEndpoint | None = None,
    ) -> None:
        """`epoch`, `election`: this master leads its cluster (kvstore.master.wire.election) in that term;
        `sock`: the RPC socket, bound already (a candidate holds its address while it waits to lead);
        `security`: the cluster secret every connection proves it knows (from the environment if None);
        `http`: the process's /metrics and /health, open while it stands by too (else, with http_port,
        this master opens its own)."""
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
        self.connections: set[RpcConnection] = set()
        # What it may hold (raising RLIMIT_NOFILE first), and which connection goes past a bound.
        c = self.config
        self.table = ConnectionTable(c.max_unauthenticated, c.max_connections_per_peer, c.max_connections)
        self.buffered = 0  # bytes of request frames still arriving, over all connections (max_buffered)
        self.refusals = Refusals(LimitedLog(log))
        self.http = http
        self.metrics = MasterMetrics(self.state, self.watch, self.paths)
        self._listeners: list[Listener] = []
        self._stopped: asyncio.Future[None] | None = None
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
        self._stopped = loop.create_future()
        table = self.table
        rpc_listener = Listener(
            self._sock or listening_socket(self.config.host, self.config.port),
            lambda: RpcConnection(self),
            what="master RPC",
            admit=table.admit_socket,
            full=lambda: table.held() >= table.budget,
            tls=self.tls,
            tls_timeout=auth.TIMEOUT_SECONDS,
            max_handshakes=table.unauthenticated,
        )
        table.others = lambda: (
            len(rpc_listener.handshakes) + rpc_listener.starting + (self.http.open if self.http else 0)
        )
        self._listen(rpc_listener)
        self.address = rpc_listener.address
        c = self.config
        if self.http is None and c.http_port is not None:
            cluster = c.cluster.partition(SHARD_INFIX)[0]  # (the cluster's own name, as a candidate's)
            role = Role(cluster, c.shard_of, self.advertised, leadership=Leadership(self.advertised))
            self.http = HttpEndpoint(listening_socket(c.host, c.http_port), role)
            self._listeners.append(self.http.listener)  # (stop() closes it)
            self.http.start()
        if self.http is not None:
            self.http.master = self
            self.http_address = self.http.address
        self._tasks.append(asyncio.create_task(self._housekeeping()))

    def _listen(self, listener: Listener) -> None:
        self._listeners.append(listener)  # (first: stop() closes its socket if starting fails)
        listener.start()

    async def stop(self) -> None:
        """Stops serving: no new connection, and every open one closed (a leader stepping down must
        change nothing more). A process's HTTP endpoint stays open, serving without this master."""
        for task in self._tasks:
            task.cancel()
        if self.http is not None and self.http.master is self:
            self.http.master = None
        for listener in self._listeners:
            listener.close()
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
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
        assert self._stopped is not None
        await self._stopped

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

    def _dispatch(
        self, msg_id: int, method: str, params: dict[str, Any], peer: str = ""
    ) -> list[Any] | Deferred:
        start = time.perf_counter()
        try:
            result = self.handlers.handle(method, params, peer)
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

    @property
    def advertised(self) -> str:
        """The address this master is known by: its advertise_host where one is set, else the address it
        is bound to, with its RPC port (kvstore.master.wire.process publishes this one in etcd)."""
        if not self.config.advertise_host:
            return self.address
        return address_of(self.config.advertise_host.strip("[]"), int(self.address.rpartition(":")[2]))

    def describe(self) -> dict[str, Any]:
        """The cluster as this master sees it (`kvstore status`)."""
        status = cluster_status(self.state, self.rates, self.advertised, self.started)
        status["master"]["authentication"] = self.authentication()
        if self.election is not None:
            status["master"].update(role="leader", epoch=self.epoch, cluster=self.election.cluster)
            status["standbys"] = list(self.election.standbys)
        return status

    # -- HTTP ---------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """This master's part of /health (kvstore.master.wire.http_endpoint adds its role)."""
        with self.watch.timed("scrape_health"):
            stats = self.state.stats()
        return {
            "status": "degraded" if stats["disks_degraded"] else "ok",
            **{k: stats[k] for k in ("objects", "segments", "clients", "usage", "disks_degraded")},
        }

    # -- time ----------------------------------------------------------------------------------------
    async def _housekeeping(self) -> None:
        period = min(0.5, self.config.heartbeat_interval / 2)
        loop = asyncio.get_running_loop()
        last = swept = loop.time()
        sweep_every = max(period, self.config.idle_timeout / 4)
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
                core, removal, replicator = state.core, state.removal, state.replicator
                with timed("expire"):
                    state.expire()
                with timed("rates"):
                    self.rates.sample(state.clock(), vars(state.counters))
                with timed("demotion_plan"):
                    core.plan_demotions()
                with timed("evict_to_watermark"):
                    removal.evict_to_watermark()
                with timed("replication_plan"):
                    replicator.plan()
                if now - swept >= sweep_every:
                    swept = now
                    with timed("idle_connections"):
                        self.table.sweep(now, self.config.idle_timeout)
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


class _SpinningSelector(selectors.EpollSelector):
    """Polls without sleeping for a moment before blocking, while that pays (kvstore.master.wire.busy_poll):
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
