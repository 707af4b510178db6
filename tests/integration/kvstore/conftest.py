from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.config import MasterConfig
from kvstore.errors import KVStoreError
from kvstore.master.wire.server import Master
from kvstore.procs import kvstore_process


@dataclass
class Cluster:
    master: str
    http: str
    nodes: list[tuple[subprocess.Popen[str], str]] = field(default_factory=list)


@contextmanager
def running_cluster() -> Iterator[Cluster]:
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


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A fresh cluster for the test alone (running_cluster): for tests that kill its nodes, fill its pool or
    count what it holds."""
    with running_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[Cluster]:
    """One cluster for a module's tests that each use keys of their own and leave its nodes and pool as
    they were (starting three processes per test was most of those tests' time). Its nodes keep their
    memory in a directory of the module's own (each test's node_memory_dir is removed after the test)."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    with (
        pytest.MonkeyPatch.context() as env,
        tempfile.TemporaryDirectory(prefix="kvstore-test-", dir=base, ignore_cleanup_errors=True) as where,
    ):
        env.setenv("KVSTORE_NODE_MEMORY_DIR", where)
        with running_cluster() as c:
            yield c


def corrupt_in_place(cluster: Cluster, location: Any, at: int = 100, garbage: bytes = b"\xee" * 16) -> None:
    """Overwrites bytes of a replica in its node's segment memory file, as a memory fault would (no peer
    can: a node admits each allocation's bytes written once, csrc/core/fence.h)."""
    engine, offset = location[2], location[4]
    pid = next(proc.pid for proc, name in cluster.nodes if name == engine)
    with open(f"/proc/{pid}/maps") as maps:
        mapped = {line.split(maxsplit=5)[-1].strip() for line in maps if line.count(" ") >= 5}
    segments = [p for p in mapped if os.path.basename(p).startswith("kvstore-node-") and p.endswith(".mem")]
    # (a node maps other nodes' segments too, to copy from them on the same host: its own is the one it
    # holds locked, kvstore.node.file_lock)
    with open("/proc/locks") as locks:
        held = {
            int(f[-3].rsplit(":", 1)[1]) for f in map(str.split, locks) if len(f) >= 8 and f[4] == str(pid)
        }
    (path,) = [p for p in segments if os.stat(p).st_ino in held]
    with open(path, "r+b") as segment:
        segment.seek(offset + at)
        segment.write(garbage)


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


def start_shard_masters(stack: ExitStack, shards: int = 2) -> list[str]:
    """Master processes for shard 0..shards-1 of `shards` (no etcd: the static list), their addresses in
    shard order; they stop with `stack`."""
    masters = []
    for shard in range(shards):
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--shard", str(shard), "--shards", str(shards)])
        )
        masters.append(ready.split()[0])
    return masters


@contextmanager
def two_shard_store() -> Iterator[ShardedStore]:
    """A client of two shard masters and one node (64 MiB) joined to both, every shard's segment mounted."""
    with ExitStack() as stack:
        masters = start_shard_masters(stack)
        stack.enter_context(
            kvstore_process(["node", "--master", ";".join(masters), "--segment-size", "64MiB"])
        )
        client = stack.enter_context(Store.connect(";".join(masters)))
        assert isinstance(client, ShardedStore)
        for part in client.stores:
            wait_for_mounts(part, 1)
        yield client


@contextmanager
def master_for_a_disk_node(disk: Path) -> Iterator[tuple[Master, list[str]]]:
    """A master in this process (0.3 s heartbeats, 10 s client TTL) and the command line of a node with
    16 MiB of memory and a 128 MiB disk at `disk`: the test starts, kills and restarts the node itself."""
    config = MasterConfig.load(port=0, heartbeat_interval=0.3, client_ttl=10, busy_poll_us=0)
    master = Master.start_in_thread(config)
    node = ["node", "--master", master.address, "--segment-size", "16MiB"]
    node += ["--disk", str(disk), "--disk-size", "128MiB"]
    try:
        yield master, node
    finally:
        master.stop()
