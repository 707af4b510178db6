"""A master process's HTTP side: /metrics and /health, served whether it leads or stands by.

A candidate (kvstore.master.wire.process) opens it before it campaigns and keeps it for its whole life, so
a standby answers probes and scrapes (it served nothing before: Prometheus saw a dead master) and a
failover changes what it says, not whether it answers. While the process leads, the leading Master is
attached and its own metrics and health are served beside the role's; a master without etcd owns an
endpoint of its own (kvstore.master.wire.server).

GET /metrics: the role and build gauges (kvstore.master.wire.metrics), then the leader's metrics.
GET /health: 200 with a JSON body: the role (single, leader or standby), cluster, shard, the leader seen
and its epoch, and while serving the master's own health ("status": "ok" or "degraded").
GET /health/leader: the same body, 200 only while this master serves (503 on a standby): a probe that
routes to the leader.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kvstore.master.wire.listener import Listener
from kvstore.master.wire.metrics import BuildInfoCollector, RoleCollector
from kvstore.master.wire.role import Role

if TYPE_CHECKING:
    from kvstore.master.wire.server import Master

HTTP_CONNECTIONS = 64  # /metrics and /health connections at once (each answers one request within 5 s)
REQUEST_SECONDS = 5.0  # a request's head must arrive within this


class HttpEndpoint:
    """/metrics and /health on `sock` (bound) for the master process whose place is `role`."""

    def __init__(self, sock: socket.socket, role: Role, standbys: Callable[[], int] | None = None) -> None:
        """`standbys`: how many standbys the leader sees (kvstore_master_standbys)."""
        self.role = role
        self.registry = CollectorRegistry()
        self.registry.register(RoleCollector(role, standbys))
        self.registry.register(BuildInfoCollector())
        self.master: Master | None = None  # the master serving now, if this process serves
        self.open = 0  # connections open (at most HTTP_CONNECTIONS)
        self.listener = Listener(
            sock,
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(), self._serve),
            what="master HTTP",
            admit=self._admit,
        )
        self.address = self.listener.address

    def start(self) -> None:
        self.listener.start()

    def close(self) -> None:
        self.listener.close()

    def _admit(self) -> bool:
        if self.open >= HTTP_CONNECTIONS:
            return False
        table = self.master.table if self.master is not None else None
        return table is None or table.held() < table.budget

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=REQUEST_SECONDS)
            parts = request.split(b"\r\n", 1)[0].split()
            path = parts[1].decode(errors="replace") if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] != b"GET":
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                await self.role.refresh()  # (a standby's leader and epoch: scrapes alone must see them move)
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, self._metrics()
            elif path in ("/health", "/health/leader"):
                health = await self._health()
                serving = path == "/health" or self.role.leading
                status = "200 OK" if serving else "503 Service Unavailable"
                ctype, body = "application/json", json.dumps(health).encode()
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
            self.open -= 1
            writer.close()

    def _metrics(self) -> bytes:
        own = generate_latest(self.registry)
        master = self.master
        if master is None:
            return own
        with master.watch.timed("scrape_metrics"):
            return own + generate_latest(master.metrics.registry)

    async def _health(self) -> dict[str, Any]:
        await self.role.refresh()
        master = self.master
        health: dict[str, Any] = {"status": "ok"} if master is None else master.health()
        return {**health, **self.role.describe()}
