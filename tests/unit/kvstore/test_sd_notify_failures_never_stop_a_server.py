"""kvstore.sd_notify speaks NOTIFY_SOCKET's vsock forms (sd_notify(3), systemd 253 on: a VM telling its
host) and never lets a notification it cannot send stop the server: a form it cannot speak, or a socket
it cannot reach, is one warning for each NOTIFY_SOCKET value and False."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator

import pytest

from kvstore import sd_notify
from kvstore.errors import InvalidArgumentError

VSOCK = getattr(socket, "AF_VSOCK", None)


@pytest.mark.skipif(VSOCK is None, reason="this Python's socket module has no AF_VSOCK")
@pytest.mark.parametrize(
    "value, kinds, address",
    [
        ("vsock:2:1234", ("SOCK_DGRAM", "SOCK_SEQPACKET"), (2, 1234)),
        ("vsock-dgram:3:1", ("SOCK_DGRAM",), (3, 1)),
        ("vsock-seqpacket:1:4294967295", ("SOCK_SEQPACKET",), (1, 2**32 - 1)),
        ("vsock-stream:2:50", ("SOCK_STREAM",), (2, 50)),
    ],
)
def test_vsock_forms_name_a_vsock_address(
    value: str, kinds: tuple[str, ...], address: tuple[int, int]
) -> None:
    where = sd_notify.notify_address(value)
    assert where.family == VSOCK
    assert where.kinds == tuple(getattr(socket, k) for k in kinds)
    assert where.address == address


@pytest.mark.parametrize(
    "value",
    ["vsock:2", "vsock:x:1", "vsock:2:-1", "vsock:4294967296:1", "vsock:2:1:3", "vsock-raw:2:1", "tcp:1"],
)
def test_a_malformed_notify_socket_is_named(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match="NOTIFY_SOCKET"):
        sd_notify.notify_address(value)


@pytest.mark.parametrize("form", ["relative/path-{}", "vsock:2:x{}", "vsock:2:{}"])
def test_what_cannot_be_sent_is_one_warning_and_false(form: str, caplog: pytest.LogCaptureFixture) -> None:
    # ("vsock:2:PORT": this host's kernel refuses it, or nothing listens at the host's CID)
    value = form.format(int.from_bytes(os.urandom(2), "big"))  # (a value not warned about before)
    with caplog.at_level(logging.WARNING, logger="kvstore.sd_notify"):
        assert not sd_notify.ready("master serving", environ={"NOTIFY_SOCKET": value})
        assert not sd_notify.ready("master serving", environ={"NOTIFY_SOCKET": value})
    warnings = [r for r in caplog.records if r.name == "kvstore.sd_notify"]
    assert len(warnings) == 1 and value in warnings[0].getMessage(), caplog.text


@pytest.fixture
def local_vsock(request: pytest.FixtureRequest) -> Iterator[tuple[socket.socket, int]]:
    """A vsock listener on this host's loopback CID (VMADDR_CID_LOCAL = 1), of the type asked for."""
    if VSOCK is None:
        pytest.skip("this Python's socket module has no AF_VSOCK")
    sock = socket.socket(VSOCK, request.param)
    try:
        sock.bind((1, 0xFFFFFFFF))  # (VMADDR_PORT_ANY)
    except OSError as exc:
        sock.close()
        pytest.skip(f"no vsock loopback on this kernel (the vsock_loopback module): {exc}")
    with sock:
        sock.listen()
        sock.settimeout(10)
        yield sock, sock.getsockname()[1]


@pytest.mark.parametrize(
    "local_vsock, prefix",
    [(socket.SOCK_SEQPACKET, "vsock"), (socket.SOCK_STREAM, "vsock-stream")],
    indirect=["local_vsock"],
)
def test_a_vsock_listener_is_told(local_vsock: tuple[socket.socket, int], prefix: str) -> None:
    listener, port = local_vsock
    got: list[bytes] = []

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            got.append(conn.recv(4096))

    taker = threading.Thread(target=accept)
    taker.start()
    assert sd_notify.ready("node serving", environ={"NOTIFY_SOCKET": f"{prefix}:1:{port}"})
    taker.join(10)
    assert got == [b"READY=1\nSTATUS=node serving"]
