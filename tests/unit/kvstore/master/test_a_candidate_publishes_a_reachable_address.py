"""The address a candidate master publishes into etcd (kvstore.master.wire.process.published_address),
from a real bound socket: its advertise host with the bound port (an IPv6 host in brackets, given with or
without them), else the address it is bound to. (A wildcard host is refused by MasterConfig before any
bind: test_a_master_publishes_its_advertise_host; tests bind loopback only.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from kvstore.config import MasterConfig
from kvstore.master.wire.process import published_address


@pytest.fixture
def bound() -> Iterator[socket.socket]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock


def test_the_advertise_host_is_published_with_the_bound_port(bound: socket.socket) -> None:
    port = bound.getsockname()[1]
    for given, published in (
        ("", f"127.0.0.1:{port}"),
        ("kv-master-0.kv.svc", f"kv-master-0.kv.svc:{port}"),
        ("10.1.2.3", f"10.1.2.3:{port}"),
        ("fd00::1", f"[fd00::1]:{port}"),
        ("[fd00::1]", f"[fd00::1]:{port}"),
    ):
        assert published_address(MasterConfig.load(advertise_host=given), bound) == published
