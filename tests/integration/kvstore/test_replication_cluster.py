"""Hot-key replication with real processes: copies made by the nodes themselves, reads spread over the
replicas, and the key survives the loss of the node that held the original."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack

import numpy as np
import pytest

from kvstore import Store
from kvstore.procs import kvstore_process
from kvstore.rpc import messages as m
from tests.integration.kvstore.conftest import Cluster


@pytest.fixture
def hot_cluster() -> Iterator[Cluster]:
    args = [
        "master",
        "--port",
        "0",
        "--client-ttl",
        "2",
        "--heartbeat-interval",
        "0.2",
        "--lease-ttl",
        "0.5",
        "--hot-access-rate",
        "5",
        "--cool-access-rate",
        "1",
        "--heat-half-life",
        "1",
    ]
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(args))
        c = Cluster(ready.split()[0], "")
        for _ in range(2):
            proc, info = stack.enter_context(
                kvstore_process(["node", "--master", c.master, "--segment-size", "32MiB"])
            )
            c.nodes.append((proc, info.split()[0]))
        yield c


def replicas(store: Store, key: str) -> list[str]:
    """Where the key lives, asked without taking a read lease (a lease holds every replica in place)."""
    match = store.match_prefix([key])
    return match.replicas[0] if match.matched else []


def wait_for(predicate, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_hot_key_replicates_and_survives_node_loss(hot_cluster: Cluster) -> None:
    value = np.random.default_rng(5).integers(0, 256, 256 << 10, dtype=np.uint8)
    with Store.connect(hot_cluster.master) as store:
        store.put("hot", value)
        store.put("cold", b"x" * 1000)
        (home,) = replicas(store, "hot")
        out = np.zeros_like(value)
        # ~50 reads/s for a while: hot, so the other node copies it.
        assert wait_for(lambda: store.get_into("hot", out) > 0 and len(replicas(store, "hot")) == 2)
        assert np.array_equal(out, value)
        assert len(replicas(store, "cold")) == 1
        stats = store.stats()["master"]
        assert stats["replica_copies"] >= 1 and stats["replica_copy_failures"] == 0
        # Reads spread: over many gets both replicas serve.
        served = set()
        for _ in range(40):
            found = store.master.call(m.GetReplicas(keys=["hot"]))[0]
            first = sorted(found.locations, key=lambda r: (r.host_id != store.host_id, np.random.random()))[0]
            served.add(first.engine)
        assert len(served) == 2
        # The node with the original dies: the copy still serves the right bytes.
        victim = next(p for p, name in hot_cluster.nodes if name == home)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        out[:] = 0
        assert store.get_into("hot", out) == value.nbytes and np.array_equal(out, value)


def test_change_replica_and_cooling(hot_cluster: Cluster) -> None:
    with Store.connect(hot_cluster.master) as store:
        store.put("k", b"y" * 5000)
        store.change_replica("k", 2)
        assert wait_for(lambda: len(replicas(store, "k")) == 2)
        assert store.get("k") == b"y" * 5000
        store.change_replica("k", 1)
        assert wait_for(lambda: len(replicas(store, "k")) == 1)
        assert store.get("k") == b"y" * 5000
