"""kvstore.sd_notify speaks sd_notify(3)'s protocol to a real AF_UNIX datagram socket, as systemd's is."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore import sd_notify
from kvstore.errors import InvalidArgumentError, KVStoreError


@pytest.fixture
def systemd_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A datagram socket bound where a Type=notify unit's NOTIFY_SOCKET would name it."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(5)
        yield sock, str(path)


def test_ready_sends_one_datagram_with_ready_and_status(systemd_socket: tuple[socket.socket, str]) -> None:
    sock, path = systemd_socket
    assert sd_notify.ready("master serving\non 127.0.0.1:5", environ={"NOTIFY_SOCKET": path})
    assert sock.recv(4096) == b"READY=1\nSTATUS=master serving on 127.0.0.1:5"


def test_an_abstract_socket_is_reached_by_its_at_name() -> None:
    name = f"kvstore-test-{os.getpid()}-{os.urandom(4).hex()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(5)
        assert sd_notify.notify("READY=1", environ={"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


def test_without_notify_socket_nothing_is_sent() -> None:
    assert not sd_notify.ready("x", environ={})
    assert not sd_notify.ready("x", environ={"NOTIFY_SOCKET": ""})


@pytest.mark.parametrize("value", ["relative/path", "@"])
def test_a_notify_socket_that_is_no_socket_address_is_refused(value: str) -> None:
    # (notify() warns instead: test_sd_notify_failures_never_stop_a_server)
    with pytest.raises(InvalidArgumentError, match="NOTIFY_SOCKET") as caught:
        sd_notify.notify_address(value)
    assert isinstance(caught.value, KVStoreError)


@pytest.mark.parametrize("field", ["READY", "STATUS=two\nlines"])
def test_a_field_must_be_one_key_value_line(field: str, systemd_socket: tuple[socket.socket, str]) -> None:
    _, path = systemd_socket
    with pytest.raises(InvalidArgumentError, match="KEY=value"):
        sd_notify.notify(field, environ={"NOTIFY_SOCKET": path})


def test_a_socket_nobody_listens_on_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kvstore.sd_notify"):
        assert not sd_notify.notify("READY=1", environ={"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert "could not tell systemd READY=1" in caplog.text
