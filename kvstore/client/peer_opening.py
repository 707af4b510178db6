"""Opening peer engines for reads that have a deadline.

The first read from a node opens its engine (a handshake: up to the engine's handshake_timeout when the
node is stopped or its link is slow). A read with a deadline waits for the handshakes it needs, all at
once, at most half of what is left of its deadline (the other half is for the bytes): a handshake not done
by then goes on in the background, that node's keys are late for this read, and later reads find it open.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait

from kvstore.client.deadline import Deadline
from transfer_engine import Peer

HANDSHAKE_SHARE = 0.5  # of what is left of a read's deadline, the most it waits for new peers' handshakes


class NotInTime:
    """A peer whose opening had not ended in time (it goes on in the background)."""


NOT_IN_TIME = NotInTime()


class PeerOpener:
    """`open_peer(name)` (the session's: blocking, None when unreachable) bounded by a read's deadline."""

    def __init__(self, open_peer: Callable[[str], Peer | None]) -> None:
        self._open_peer = open_peer
        self._lock = threading.Lock()
        self._opened: dict[str, Peer] = {}
        self._opening: dict[str, Future[Peer | None]] = {}
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="kvstore-peer-open")

    def open(self, name: str) -> Peer | None:
        """The peer, opened now if it is not yet (blocking, as the session opens it); None: unreachable."""
        return self._open_peer(name)

    def opened(self, name: str) -> Peer | None:
        """The peer if it is open already; else None, its opening started in the background."""
        started = self._start(name)
        return started if isinstance(started, Peer) else None

    def open_all(self, names: Iterable[str], deadline: Deadline | None) -> dict[str, Peer | NotInTime | None]:
        """Each peer open (None: unreachable), or NOT_IN_TIME when its handshake outlasts the share of
        `deadline` reads give handshakes (None: no deadline, each opened as the session opens it)."""
        if deadline is None:
            return {name: self._open_peer(name) for name in names}
        out: dict[str, Peer | NotInTime | None] = {}
        opening: dict[str, Future[Peer | None]] = {}
        for name in names:
            started = self._start(name)
            if isinstance(started, Peer):
                out[name] = started
            else:
                opening[name] = started
        if opening:
            wait(opening.values(), timeout=deadline.left() * HANDSHAKE_SHARE)
            for name, future in opening.items():
                out[name] = future.result() if future.done() else NOT_IN_TIME
        return out

    def _start(self, name: str) -> Peer | Future[Peer | None]:
        with self._lock:
            peer = self._opened.get(name)
            if peer is not None:
                return peer
            opening = self._opening.get(name)
            if opening is None:
                opening = self._opening[name] = self._pool.submit(self._open_and_keep, name)
            return opening

    def _open_and_keep(self, name: str) -> Peer | None:
        peer = None
        try:
            peer = self._open_peer(name)
        finally:
            with self._lock:
                self._opening.pop(name, None)  # (an unreachable one is tried again by the next read)
                if peer is not None:
                    self._opened[name] = peer
        return peer

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
