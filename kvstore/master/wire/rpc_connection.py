"""One connection to the master's RPC: the handshake, then frames parsed as bytes arrive and answered in
order, with no coroutine per message (the state is only touched from the master's loop, so handlers run
inline). With a cluster secret and no TLS each frame's MAC is checked on the way in and made on the way
out (kvstore.rpc.frame_mac). What the master holds for it is bounded (kvstore.master.wire.connection_table,
frame_timeout, max_buffered, back-pressure)."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, cast

from kvstore import rpc
from kvstore.errors import KVStoreError, TooManyConnectionsError
from kvstore.limited_log import LimitedLog
from kvstore.master.service.handlers import Deferred
from kvstore.rpc import auth

if TYPE_CHECKING:
    from kvstore.master.wire.server import Master

REPLY_FLUSH = 256 << 10  # replies written out at least this often while a read's requests are answered
# A frame still arriving this long after its first bytes no longer keeps its connection from eviction: a
# member that sends a whole frame and then a few bytes of the next, again and again, holds no place.
PARTIAL_GRACE = 1.0


class Refusals:
    """Connections refused or cut, logged a line a second per cause (kvstore.limited_log)."""

    def __init__(self, log: LimitedLog) -> None:
        self._log = log

    def warn(self, what: str, peer: str, why: str) -> None:
        self._log.warn(why, f"{what} a connection from {peer}: {why}")


class RpcConnection(asyncio.Protocol):
    def __init__(self, master: Master) -> None:
        self.master = master
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        # None once it proved itself; frames MACed unless the connection is TLS (which protects them)
        self.handshake: auth.ServerHandshake | None = auth.ServerHandshake(master.secret, master.tls is None)
        self.frames: auth.FrameMac | None = None  # each frame's MAC, both ways (with a secret: auth)
        self.tag = 0  # bytes of a frame's MAC
        self.auth_timer: asyncio.TimerHandle | None = None
        self.peer = self.host = "?"
        self.frame_timer: asyncio.TimerHandle | None = None  # runs while a frame is half-arrived
        self.held = 0  # bytes of it buffered (in master.buffered)
        self.partial_since = 0.0  # loop time its first bytes arrived (PARTIAL_GRACE)
        self.writing_paused = False  # the peer does not read its replies: no more are made meanwhile
        self.last_active = 0.0  # loop time of the last whole frame in or reply out (idle_timeout)
        self.deferred = 0  # replies owed to it that wait (a parked work poll is not idle)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.loop = asyncio.get_running_loop()
        self.last_active = self.loop.time()
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        self.host = str(peer[0]) if isinstance(peer, tuple) and peer else self.peer
        self.master.connections.add(self)
        self.auth_timer = self.loop.call_later(
            auth.TIMEOUT_SECONDS, self._refuse, "did not authenticate in time"
        )
        self.master.table.arrived(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._hold(0)
        self.master.connections.discard(self)
        self.master.table.gone(self)
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        if self.frame_timer is not None:
            self.frame_timer.cancel()

    def idle(self) -> bool:
        """Nothing owed to it (no reply deferred, no frame that began arriving within PARTIAL_GRACE), and
        not closing already."""
        transport = self.transport
        if self.deferred or transport is None or transport.is_closing():
            return False
        return not self.held or self.loop is None or self.loop.time() - self.partial_since > PARTIAL_GRACE

    def evict(self, why: str) -> None:
        """Cuts it to make room or because it idled too long (the table forgets it at once)."""
        self.master.table.gone(self)
        self._cut(why)

    def _refuse(self, why: str) -> None:
        if self.handshake is None:
            return
        self.master.table.gone(self)
        if self.transport is None or self.transport.is_closing():
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
        refused = self.master.table.authenticated_now(self)
        if refused:
            self.master.refusals.warn("refused", self.peer, refused)
            error = TooManyConnectionsError(f"{refused}(max_connections_per_peer, max_connections)")
            self._write([rpc.pack([0, error.code, str(error), None])])
            self.transport.close()
            return b""
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
        if pending and (progressed or not self.held) and self.loop is not None:
            self.partial_since = self.loop.time()  # (a new frame began: after the last whole one)
        self.held = pending
        if progressed and self.loop is not None:
            self.last_active = self.loop.time()
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
        if self.loop is not None:
            self.last_active = self.loop.time()

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
                self._cut(str(exc))  # nothing of it is done, nor answered: the stream is not the client's
                replies.clear()
                return answered
            except rpc.FrameError as exc:
                replies.append(rpc.pack([0, exc.code, str(exc), None]))
                self._write(replies)
                replies.clear()
                self.transport.close()  # the stream cannot be trusted any more
                self.buffer.clear()
                return answered
            answered = True
            reply = self.master._dispatch(msg_id, method, params, self.host)
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
        self.deferred += 1

        def send() -> None:
            nonlocal sent
            if sent:
                return
            sent = True
            self.deferred -= 1
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
