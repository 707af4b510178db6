"""`kvstore status` of a cluster split over shards asks every shard at once: shards whose masters do not
answer cost one timeout in all, not one each, and each is named with its error in shard order."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from kvstore.client.status import fetch_shards


@pytest.fixture
def silent_masters() -> Iterator[list[str]]:
    """Three sockets on 127.0.0.1 that take connections (the backlog) and never answer."""
    socks = []
    for _ in range(3):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
    yield [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()


def test_silent_shards_cost_one_timeout_not_one_each(silent_masters: list[str]) -> None:
    began = time.monotonic()
    statuses = fetch_shards(silent_masters, timeout=1.0)
    took = time.monotonic() - began
    assert [sorted(s) for s in statuses] == [["error"]] * 3
    assert took < 2.5, f"three silent shards took {took:.1f} s: asked one after another"


def test_a_refused_shard_is_named_in_its_place(silent_masters: list[str]) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: refused at once
    statuses = fetch_shards([f"127.0.0.1:{port}", silent_masters[0]], timeout=0.5)
    assert len(statuses) == 2 and all("error" in s for s in statuses)
    assert f"127.0.0.1:{port}" in statuses[0]["error"]  # in shard order, each named
    assert silent_masters[0] in statuses[1]["error"]
