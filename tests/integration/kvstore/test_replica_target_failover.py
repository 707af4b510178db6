"""A user's change_replica survives a failover: the count is a ledger record (ReplicaTargetSet) that the
nodes are told with their holds (a field of its own, beside the put's count), so the master that takes
over restores it, pinned, from what they name back and keeps the object at exactly that count: a hot
object gains no copy above it, and one lost is made again."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from kvstore import Store
from kvstore.errors import KVStoreError
from kvstore.procs import kvstore_process
from kvstore.rpc.records import MEMORY
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_ha import HA, etcd, leader_of, value_of

__all__ = ["etcd"]  # (the fixture, used by name)

Process = tuple[subprocess.Popen[str], str]  # a process and its ready line


@contextmanager
def cluster(etcd_address: str, name: str) -> Iterator[tuple[list[Process], list[Process]]]:
    """Two candidate masters (addresses as their ready lines) and three memory nodes (engine address
    first in theirs)."""
    with ExitStack() as stack:
        masters = []
        for _ in range(2):
            args = ["master", "--port", "0", "--etcd", etcd_address, "--cluster", name, *HA]
            proc, ready = stack.enter_context(kvstore_process(args))
            masters.append((proc, ready.split()[0]))
        node = ["node", "--etcd", etcd_address, "--cluster", name, "--segment-size", "32MiB"]
        nodes = [stack.enter_context(kvstore_process(node)) for _ in range(3)]
        yield masters, nodes


def _until(what: str, check: Callable[[], bool], seconds: float, every: float = 0.1) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except KVStoreError:
            pass  # a master taking over does not answer yet
        assert time.monotonic() < deadline, f"{what} within {seconds} s"
        time.sleep(every)


def _engines(store: Store, key: str) -> set[str]:
    """The engines of `key`'s memory replicas, as the master sees them (a read: it counts as one)."""
    found = store.locate([key])[0]
    return set() if found is None else {loc.engine for loc in found.locations if loc.tier == MEMORY}


def _stays_at_its_count_when_hot(store: Store, key: str, holders: set[str]) -> None:
    """Reads `key` well above the hot rate (20 a second, heat halving every 5 s: about 150 reads in a
    burst), then 3 s more: an object asking only for its base count would grow to a copy on every node
    (three) within a housekeeping round or two, a pinned one stays on its two."""
    start = time.monotonic()
    hot_since, reads = 0.0, 0
    while not hot_since or time.monotonic() - hot_since < 3.0:
        engines = _engines(store, key)
        reads += 1
        assert engines == holders, f"{engines} after {reads} reads (pinned on {holders})"
        if reads == 400:
            hot_since = time.monotonic()
        assert time.monotonic() - start < 60, reads


def test_a_changed_replica_count_is_kept_by_the_master_that_takes_over(
    etcd: tuple[str, subprocess.Popen[bytes]],
) -> None:
    address, _ = etcd
    with cluster(address, "target") as (masters, nodes):
        leader, _ = leader_of(masters)
        with Store.connect(etcd=address, cluster="target", rpc_timeout=3.0) as store:
            wait_for_mounts(store, 3)
            store.put("k", value_of(1), replicas=1)
            store.change_replica("k", 2)
            _until("a second copy", lambda: len(_engines(store, "k")) == 2, 20)
            # The nodes have every hold (the copy's, and the first replica's told again with the count).
            _until("the holds told", lambda: store.stats()["master"]["holds_outstanding"] == 0, 10)
            leader.send_signal(signal.SIGKILL)
            leader.wait()
            leader_of([m for m in masters if m[0] is not leader])
            wait_for_mounts(store, 3, 30)
            holders = _engines(store, "k")
            assert len(holders) == 2, holders
            _stays_at_its_count_when_hot(store, "k", holders)
            lost = next(proc for proc, ready in nodes if ready.split()[0] in holders)
            lost.send_signal(signal.SIGKILL)
            lost.wait()
            _until("the lost node dropped", lambda: store.stats()["master"]["segments"] == 2, 30)
            # A read finds the object below its count and it is copied to the third node (the put's
            # count, 1, would leave it at one copy).
            _until("the lost copy made again", lambda: len(_engines(store, "k") - holders) == 1, 40, 1.0)
            assert len(_engines(store, "k")) == 2 and store.get("k") == value_of(1)
