from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field

import pytest

from kvstore import Store
from kvstore.errors import KVStoreError
from kvstore.procs import kvstore_process


@dataclass
class Cluster:
    master: str
    http: str
    nodes: list[tuple[subprocess.Popen[str], str]] = field(default_factory=list)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A master process and two storage node processes (64 MiB each), short heartbeat TTL."""
    with ExitStack() as stack:
        _, ready = stack.enter_context(
            kvstore_process(
                [
                    "master",
                    "--port",
                    "0",
                    "--http-port",
                    "0",
                    "--client-ttl",
                    "2",
                    "--heartbeat-interval",
                    "0.3",
                    "--lease-ttl",
                    "1",
                ]
            )
        )
        address, http = ready.split()[0], ready.split()[1].removeprefix("http=")
        c = Cluster(address, http)
        for _ in range(2):
            proc, info = stack.enter_context(
                kvstore_process(["node", "--master", address, "--segment-size", "64MiB"])
            )
            c.nodes.append((proc, info.split()[0]))
        yield c


def wait_for_mounts(store: Store, count: int, timeout: float = 15.0) -> None:
    """Waits until `count` segments are mounted and none is still being restored (a segment counts from its
    mount, but what its node holds is only found once the node has named it all back)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(KVStoreError):  # a master that just started may not answer yet
            stats = store.stats()["master"]
            if stats["segments"] >= count and stats["segments_restoring"] == 0:
                return
        assert time.monotonic() < deadline, f"{count} segments not mounted and restored in {timeout} s"
        time.sleep(0.05)
