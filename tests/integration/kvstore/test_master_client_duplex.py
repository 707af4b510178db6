"""A client with requests out keeps reading replies while it sends the next one. A master stops reading a
connection whose replies are not read (back-pressure), so a client that only wrote, a large request
after one whose large reply it had not read yet, would wait on the master as the master waits on it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from kvstore.cluster.master_client import MasterClient
from kvstore.rpc import framing as rpc
from kvstore.rpc import messages as m
from kvstore.rpc.auth import ServerHandshake
from kvstore.rpc.messages import PROTOCOL_VERSION

SMALL_BUFFER = 16 << 10
REPLY_BYTES = 8 << 20  # far more than the two sockets' buffers hold


def _read_frame(sock: socket.socket, buffer: bytearray) -> list:
    def fill(n: int) -> None:
        while len(buffer) < n:
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise EOFError
            buffer.extend(chunk)

    fill(rpc.HEADER_SIZE)
    n = rpc.frame_length(bytes(buffer[: rpc.HEADER_SIZE]))
    fill(rpc.HEADER_SIZE + n)
    body = bytes(buffer[rpc.HEADER_SIZE : rpc.HEADER_SIZE + n])
    del buffer[: rpc.HEADER_SIZE + n]
    return rpc.unpack(body)


@pytest.fixture
def stubborn_master() -> Iterator[tuple[str, list[str]]]:
    """A peer that speaks the master's protocol and, like the master under back-pressure, reads no
    further request while a reply is on its way: it answers each request in full (a large reply to the
    first) before it reads the next."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
        with conn:
            handshake = ServerHandshake(b"")
            while not handshake.done:
                conn.sendall(handshake.feed(conn.recv(4096)))
            buffer = bytearray(handshake.rest())
            try:
                while True:
                    msg_id, method, params = rpc.parse_request(_read_frame(conn, buffer))
                    seen.append(method)
                    if method == "hello":
                        result: object = [PROTOCOL_VERSION, 0]
                    elif len(seen) == 2:  # the first request after hello: a reply larger than any buffer
                        result = [b"r" * REPLY_BYTES]
                    else:
                        result = [len(params["keys"])]
                    conn.sendall(rpc.pack([msg_id, 0, "", result]))  # (blocks until the client reads)
            except (EOFError, OSError):
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        listener.close()
        thread.join(timeout=10)


def test_a_large_request_goes_out_while_a_large_reply_comes_in(
    stubborn_master: tuple[str, list[str]],
) -> None:
    address, seen = stubborn_master
    client = MasterClient(address, timeout=10.0, secret=b"", tls_context=None)
    try:
        client.hello()
        first = client.send(m.Exists(keys=["k"]))
        # ~8 MiB of keys: more than the buffers between the two hold while the peer writes its reply
        second = client.send(m.Exists(keys=[f"key-{i:06d}-" + "x" * 64 for i in range(100_000)]))
        assert client.receive(second, raw=True) == [100_000]
        assert client.receive(first, raw=True) == [b"r" * REPLY_BYTES]
        assert seen == ["hello", "exists", "exists"]
    finally:
        client.close()
