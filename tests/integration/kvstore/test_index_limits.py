"""`kvstore index` under a flood of sockets (issue 39, item 8): 256 idle sockets locked routers out of the
index (every new connection was closed at once, for as long as the flood held them). Past its bound a new
connection now takes the place of the one idle longest, so a router is answered however many silent or
half-sent connections are held; the index logs a few lines, never a traceback per connection."""

from __future__ import annotations

import http.client
import json
import socket
import time

from kvstore.procs import kvstore_process


def _health(address: str) -> int:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/health")
        reply = conn.getresponse()
        assert json.loads(reply.read()) == {"status": "ok"}
        return reply.status
    finally:
        conn.close()


def test_silent_and_half_sent_connections_never_lock_a_router_out() -> None:
    with kvstore_process(["index", "--port", "0"]) as (proc, ready):
        address = ready.removeprefix("http://")
        host, port = address.rsplit(":", 1)
        flood: list[socket.socket] = []
        try:
            for i in range(300):  # past the 256 it holds: silent ones, and requests begun and left
                s = socket.create_connection((host, int(port)), timeout=10)
                if i % 2:
                    s.sendall(b"POST /query HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
                flood.append(s)
            for _ in range(3):
                started = time.monotonic()
                assert _health(address) == 200
                assert time.monotonic() - started < 5
            assert proc.poll() is None
        finally:
            for s in flood:
                s.close()
        assert _health(address) == 200
