"""The publishers the index listens to, and the one thread that reads them and writes the index.

Each registration is a ZMQ SUB socket on the publisher's endpoint and, when it has one, a DEALER on its
replay endpoint: on registering, the index asks for every batch the publisher still keeps (an engine
that started before the index, or before it was registered, is caught up), and again from the first
missing sequence number whenever one is skipped. Live batches that arrive during a replay are held and
applied after it, in order. Sockets are made, read and closed only on the thread (ZMQ sockets are not
thread-safe); HTTP threads hand it registrations through a queue and wait for the answer.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from kvstore.errors import InternalError, InvalidArgumentError, ProtocolError
from kvstore.index.events import Batch, Translator, decode_frames
from kvstore.index.table import PrefixIndex, Scope
from kvstore.limited_log import LimitedLog

log = logging.getLogger("kvstore.index")

POLL_MS = 50
READS_PER_TURN = 256  # batches read from one socket before the others get a turn
REPLAY_TIMEOUT = 5.0  # seconds a replay may take before the held batches are applied anyway
MAX_MESSAGE = 64 << 20  # bytes: ZMQ drops a larger message (and the connection that sent it)
END_OF_REPLAY = -1
COMMAND_TIMEOUT = 10.0  # seconds an HTTP thread waits for the event thread


@dataclass(frozen=True)
class Registration:
    """A publisher as POST /register names it."""

    endpoint: str
    kind: str
    scope: Scope
    instance_id: str
    dp_rank: int
    replay_endpoint: str | None = None
    namespace: str | None = None  # (a store's publisher: the namespace whose blocks it credits)

    @property
    def credits_store(self) -> bool:
        """A store's publisher whose blocks count for every instance of the model (not an instance)."""
        return self.namespace is not None

    @property
    def key(self) -> str:
        """How /unregister names it: instance|tenant|rank."""
        return f"{self.instance_id}|{self.scope.tenant_id}|{self.dp_rank}"


def check_endpoint(endpoint: str) -> str:
    """A publisher endpoint the index may connect to: tcp://HOST:PORT or ipc://PATH."""
    if not isinstance(endpoint, str) or len(endpoint) > 1024:
        raise InvalidArgumentError("endpoint must be a string")
    if endpoint.startswith("ipc://") and len(endpoint) > 6:
        return endpoint
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint[6:].rpartition(":")
        if host and port.isdigit() and 0 < int(port) < 65536 and "*" not in host:
            return endpoint
    raise InvalidArgumentError(f"endpoint {endpoint!r} must be tcp://HOST:PORT or ipc://PATH")


@dataclass
class _Publisher:
    registration: Registration
    translator: Translator
    sub: Any
    replay: Any = None
    last: int | None = None  # the last sequence number applied
    replaying_since: float | None = None
    held: list[Batch] = field(default_factory=list)
    missed: int = 0  # sequence numbers skipped with no replay to fill them
    bad: int = 0  # batches that did not decode


class Subscriptions:
    """Registrations and the reader thread; `lock` guards the index (held while a batch is applied)."""

    def __init__(
        self, index: PrefixIndex, lock: threading.Lock, seed: int, max_publishers: int = 4096
    ) -> None:
        import zmq  # (only the index service needs ZMQ)

        self._zmq = zmq
        self.index, self.lock, self.seed, self.max_publishers = index, lock, seed, max_publishers
        self._context = zmq.Context()
        self._commands: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._publishers: dict[str, _Publisher] = {}  # thread only
        self._registered: dict[str, Registration] = {}  # copy for readers, under `lock`
        self._warn = LimitedLog(log)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="kvstore-index-events", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._running = False
        self._thread.join(timeout=5)
        self._context.destroy(linger=0)

    def register(self, r: Registration) -> None:
        check_endpoint(r.endpoint)
        if r.replay_endpoint is not None:
            check_endpoint(r.replay_endpoint)
        self._call(lambda: self._add(r))

    def unregister(self, instance_id: str, tenant_id: str, dp_rank: int) -> list[str]:
        return self._call(lambda: self._remove(f"{instance_id}|{tenant_id}|{dp_rank}"))

    def registered(self) -> list[Registration]:
        """Every registration (call under `lock`)."""
        return list(self._registered.values())

    def status(self) -> list[dict[str, Any]]:
        return self._call(self._status)

    def _call(self, fn: Callable[[], Any]) -> Any:
        done: Future[Any] = Future()
        self._commands.put((fn, done))
        try:
            return done.result(timeout=COMMAND_TIMEOUT)
        except FutureTimeout:
            raise InternalError("the index's event thread did not answer") from None

    # --- the thread -----------------------------------------------------------------------------------

    def _run(self) -> None:
        zmq = self._zmq
        while self._running:
            self._do_commands()
            poller = zmq.Poller()
            for p in self._publishers.values():
                poller.register(p.sub, zmq.POLLIN)
                if p.replay is not None:
                    poller.register(p.replay, zmq.POLLIN)
            if not self._publishers:
                time.sleep(POLL_MS / 1000)
                continue
            ready = dict(poller.poll(POLL_MS))
            for p in list(self._publishers.values()):
                if p.replay is not None and p.replay in ready:
                    self._read_replay(p)
                if p.sub in ready:
                    self._read_live(p)
                if p.replaying_since is not None and time.monotonic() - p.replaying_since > REPLAY_TIMEOUT:
                    self._end_replay(p)
        for p in self._publishers.values():
            self._close(p)

    def _do_commands(self) -> None:
        while True:
            try:
                fn, done = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                done.set_result(fn())
            except Exception as exc:
                done.set_exception(exc)

    def _add(self, r: Registration) -> None:
        zmq = self._zmq
        if r.key in self._publishers:
            old = self._publishers[r.key].registration
            if old == r:
                return  # (registering twice is not an error)
            self._remove(r.key)
        if len(self._publishers) >= self.max_publishers:
            raise InvalidArgumentError(f"the index already has {self.max_publishers} publishers")
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            sub.connect(r.endpoint)
        except zmq.ZMQError as exc:
            sub.close()
            raise InvalidArgumentError(f"cannot subscribe to {r.endpoint}: {exc}") from None
        translator = Translator(self.index, r.scope, r.instance_id, r.dp_rank, self.seed, r.namespace)
        p = _Publisher(r, translator, sub)
        if r.replay_endpoint is not None:
            p.replay = self._context.socket(zmq.DEALER)
            p.replay.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
            p.replay.setsockopt(zmq.LINGER, 0)
            try:
                p.replay.connect(r.replay_endpoint)
            except zmq.ZMQError as exc:
                self._close(p)
                raise InvalidArgumentError(f"cannot connect to {r.replay_endpoint}: {exc}") from None
            self._ask_replay(p, 0)
        self._publishers[r.key] = p
        with self.lock:
            self._registered[r.key] = r

    def _remove(self, key: str) -> list[str]:
        p = self._publishers.pop(key, None)
        if p is None:
            return []
        self._close(p)
        r = p.registration
        with self.lock:
            del self._registered[key]
            self.index.clear(r.instance_id, r.dp_rank)
        return [key]

    def _close(self, p: _Publisher) -> None:
        p.sub.close(linger=0)
        if p.replay is not None:
            p.replay.close(linger=0)

    def _status(self) -> list[dict[str, Any]]:
        out = []
        for key, p in self._publishers.items():
            c = p.translator.counts
            out.append(
                {
                    "key": key,
                    "endpoint": p.registration.endpoint,
                    "type": p.registration.kind,
                    "last_seq": p.last,
                    "batches": c.batches,
                    "stored_blocks": c.stored,
                    "removed_blocks": c.removed,
                    "cleared": c.cleared,
                    "unplaced_blocks": c.unplaced,
                    "refused_events": c.refused,
                    "skipped_blocks": c.skipped,
                    "namespace": p.registration.namespace,
                    "missed_batches": p.missed,
                    "bad_batches": p.bad,
                }
            )
        return out

    def _ask_replay(self, p: _Publisher, start: int) -> None:
        try:
            p.replay.send_multipart([b"", start.to_bytes(8, "big")], flags=self._zmq.NOBLOCK)
        except self._zmq.ZMQError:
            return  # (not connected yet: the live stream goes on, gaps are counted)
        p.replaying_since = time.monotonic()

    def _read_live(self, p: _Publisher) -> None:
        for _ in range(READS_PER_TURN):
            try:
                frames = p.sub.recv_multipart(flags=self._zmq.NOBLOCK)
            except self._zmq.Again:
                return
            batch = self._decode(p, frames)
            if batch is None:
                continue
            if batch.seq == 0 and p.last:  # the publisher started again: what it held is gone
                self._restarted(p)
            if p.replaying_since is not None:
                p.held.append(batch)
            elif p.last is not None and batch.seq > p.last + 1 and p.replay is not None:
                p.held.append(batch)
                self._ask_replay(p, p.last + 1)
            else:
                self._apply(p, batch)

    def _restarted(self, p: _Publisher) -> None:
        r = p.registration
        p.last = None
        p.held.clear()
        p.translator.sequence.clear()
        with self.lock:
            self.index.clear(r.instance_id, r.dp_rank)

    def _read_replay(self, p: _Publisher) -> None:
        for _ in range(READS_PER_TURN):
            try:
                frames = p.replay.recv_multipart(flags=self._zmq.NOBLOCK)
            except self._zmq.Again:
                return
            if len(frames) == 4 and frames[0] == b"":
                frames = frames[1:]
            if len(frames) == 3 and frames[1] == END_OF_REPLAY.to_bytes(8, "big", signed=True):
                self._end_replay(p)
                continue
            batch = self._decode(p, frames)
            if batch is not None:
                self._apply(p, batch)

    def _end_replay(self, p: _Publisher) -> None:
        p.replaying_since = None
        held, p.held = p.held, []
        for batch in sorted(held, key=lambda b: b.seq):
            self._apply(p, batch)

    def _decode(self, p: _Publisher, frames: list[bytes]) -> Batch | None:
        try:
            return decode_frames(frames)
        except ProtocolError as exc:
            p.bad += 1
            self._warn.warn(p.registration.key, f"a bad KV-event batch from {p.registration.endpoint}: {exc}")
            if len(frames) == 3 and len(frames[1]) == 8 and p.last is not None:
                # (its number is taken: asking for it again would bring the same bad batch back)
                p.last = max(p.last, int.from_bytes(frames[1], "big"))
            return None

    def _apply(self, p: _Publisher, batch: Batch) -> None:
        if p.last is not None and batch.seq <= p.last:
            return  # (already applied: a replay overlapping the live stream)
        if p.last is not None and batch.seq > p.last + 1:
            p.missed += batch.seq - p.last - 1
        p.last = batch.seq
        with self.lock:
            p.translator.apply(batch)
