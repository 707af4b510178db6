"""Which connections the master holds, and which one goes when it holds too many: bounds that cost an
attacker its own connections first and never lock out a peer that works.

- The master raises RLIMIT_NOFILE to its hard limit (raise_fd_limit) and keeps FD_RESERVE descriptors
  for itself (files, the mount check's sockets, etcd, logs): past `budget` connections a new socket is
  refused at accept, unless one still proving the secret can go instead.
- Sockets still proving the secret: the oldest is evicted past `unauthenticated` (a flood of idle sockets
  never keeps out a peer that authenticates).
- Authenticated ones, per host (max_connections_per_peer) and in all (`authenticated`): past a bound, the
  one idle longest goes (of that host; in all, of the host holding the most). Idle: nothing owed to it (no
  reply deferred, no frame that began arriving within the last second: rpc_connection.PARTIAL_GRACE; a
  frame left half-sent longer holds no place). A client whose idle connection went opens another at its next
  call, so a flood of idle connections from one host costs its other clients nothing. Only when none is
  idle is the new one refused (TooManyConnectionsError).
- An authenticated connection idle longer than idle_timeout is cut (the sweep).
"""

from __future__ import annotations

import collections
import os
import resource
from collections.abc import Callable
from typing import Protocol

FD_RESERVE = 64


class Connection(Protocol):
    host: str
    last_active: float  # loop time of its last whole frame in or reply out

    def idle(self) -> bool:
        """Nothing owed to it (no reply deferred, no frame that began arriving within a second), and not
        closing already."""
        ...

    def evict(self, why: str) -> None: ...


def raise_fd_limit() -> int:
    """Raises this process's RLIMIT_NOFILE soft limit to its hard limit; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # (kept as it was: the budget below follows it)
    return soft


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 64  # (no /proc: a guess; the reserve covers it)


class ConnectionTable:
    def __init__(self, max_unauthenticated: int, max_per_peer: int, max_connections: int) -> None:
        """`max_connections`: authenticated connections in all (0: as many as the descriptors allow)."""
        limit = raise_fd_limit()
        self.fd_limit = limit
        self.budget = max(limit - FD_RESERVE - open_fds(), 8)  # connections at once, of every kind
        self.unauthenticated = max(1, min(max_unauthenticated, self.budget // 4))
        room = self.budget - self.unauthenticated
        self.authenticated = max(1, min(max_connections, room) if max_connections else room)
        self.max_per_peer = max_per_peer
        self.waiting: dict[Connection, None] = {}  # still proving the secret, oldest first
        self.by_host: dict[str, dict[Connection, None]] = {}  # authenticated, per host
        self.per_peer: collections.Counter[str] = collections.Counter()
        self.count = 0  # authenticated, in all
        self.others: Callable[[], int] = lambda: 0  # other sockets held (TLS handshakes running, HTTP)

    def held(self) -> int:
        return len(self.waiting) + self.count + self.others()

    def admit_socket(self) -> bool:
        """At accept: whether a new socket may be taken (one still proving the secret is evicted to make
        room, if there is one); False past the budget (the reserve is the master's)."""
        if self.held() < self.budget:
            return True
        if self.waiting:
            next(iter(self.waiting)).evict("evicted: the master holds all the connections it may")
            return True
        return False

    def arrived(self, conn: Connection) -> None:
        self.waiting[conn] = None
        if len(self.waiting) > self.unauthenticated:
            oldest = next(iter(self.waiting))
            oldest.evict("evicted: too many connections waiting to authenticate (max_unauthenticated)")

    def authenticated_now(self, conn: Connection) -> str:
        """Counts `conn` in once it proved the secret, after evicting an idle one if a bound is reached;
        the bound that refuses it ("" when it is in)."""
        self.waiting.pop(conn, None)
        if self.per_peer[conn.host] >= self.max_per_peer:
            victim = _idlest(self.by_host.get(conn.host, {}))
            if victim is None:
                return (
                    f"the master holds {self.max_per_peer} connections from {conn.host} already, none idle "
                )
            victim.evict(f"evicted, idle longest: {self.max_per_peer} connections from that host")
        if self.count >= self.authenticated:
            busiest = max(self.by_host, key=lambda h: len(self.by_host[h]), default="")
            victim = _idlest(self.by_host.get(busiest, {})) or _idlest(
                {c: None for conns in self.by_host.values() for c in conns}
            )
            if victim is None:
                return f"the master holds {self.authenticated} connections already, none idle "
            victim.evict(f"evicted, idle longest: the master holds {self.authenticated} connections")
        self.by_host.setdefault(conn.host, {})[conn] = None
        self.per_peer[conn.host] += 1
        self.count += 1
        return ""

    def gone(self, conn: Connection) -> None:
        self.waiting.pop(conn, None)
        conns = self.by_host.get(conn.host)
        if conns is None or conn not in conns:
            return
        del conns[conn]
        self.count -= 1
        self.per_peer[conn.host] -= 1
        if not conns:
            del self.by_host[conn.host]
            del self.per_peer[conn.host]

    def sweep(self, now: float, idle_timeout: float) -> None:
        """Cuts every authenticated connection idle for longer than `idle_timeout`."""
        stale = [
            conn
            for conns in self.by_host.values()
            for conn in conns
            if now - conn.last_active > idle_timeout and conn.idle()
        ]
        for conn in stale:
            conn.evict(f"idle for more than {idle_timeout:g} s (idle_timeout)")


def _idlest(conns: dict[Connection, None]) -> Connection | None:
    idle = [c for c in conns if c.idle()]
    return min(idle, key=lambda c: c.last_active) if idle else None
