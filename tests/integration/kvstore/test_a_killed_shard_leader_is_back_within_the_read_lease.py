"""Issue 42's "kill one shard's leader: only that shard's keys miss, for <= the lease TTL", with every
setting at its default (leader_ttl 3 s, the read lease 5 s, heartbeats every second): two shards of a
leader and a standby each over a real etcd, one node of both, a client putting all along.

The killed leader's keys miss until its lease ends in etcd (the standby may not lead before: no two
leaders) and are back within the read lease (`lease_ttl`): a client holding read leases on them does not
notice the failover. After etcd ends the lease, only the standby's watch, its start, the node joining it
and the restore from the node's holds are left: a fraction of a second. The other shard never misses a
read nor fails a put; no read returns other bytes; every acknowledged object reads back.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.config.master import MasterConfig
from kvstore.procs import kvstore_process
from kvstore.rpc import etcd as etcd_keys
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_each_shard_fails_over_and_restarts_on_its_own import (
    Writer,
    check_all_acknowledged,
    read_uncached,
    value_of,
)
from tests.integration.kvstore.test_ha import LeaderWatch, etcd_server, leader_of

CLUSTER = "readlease"
DEFAULTS = MasterConfig()
# After etcd ends the lease: the standby wakes (a watch), starts serving, the node joins it and names its
# holds back, the reader's next pass. Tens of milliseconds on an idle machine; the bound is for a loaded one.
AFTER_THE_LEASE = 1.0
Masters = list[list[tuple[subprocess.Popen[str], str]]]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, Masters]]:
    """etcd's address, and two shards of two candidate masters each (default settings); a node of 64 MiB."""
    with etcd_server(tmp_path, "127.0.0.1") as (address, _), ExitStack() as stack:
        masters: Masters = [[], []]
        for shard in (0, 1):
            where = ["--etcd", address, "--cluster", CLUSTER, "--shard", str(shard), "--shards", "2"]
            for _ in range(2):
                proc, ready = stack.enter_context(kvstore_process(["master", "--port", "0", *where]))
                masters[shard].append((proc, ready.split()[0]))
        node = ["node", "--etcd", address, "--cluster", CLUSTER, "--segment-size", "64MiB"]
        stack.enter_context(kvstore_process(node))
        yield address, masters


class KeyDeleted:
    """When etcd deletes a key (a watch of it, from now on)."""

    def __init__(self, etcd: str, key: str) -> None:
        self.at: float | None = None
        self._client = etcd_keys.connect(etcd, 2.0)
        events, self._cancel = self._client.watch(key)
        self._thread = threading.Thread(target=self._run, args=(events,), daemon=True)
        self._thread.start()

    def _run(self, events: Iterator[object]) -> None:
        for event in events:
            if type(event).__name__ == "DeleteEvent" and self.at is None:
                self.at = time.monotonic()

    def close(self) -> None:
        self._cancel()
        self._client.close()


def test_a_killed_leaders_shard_misses_only_until_its_lease_ends_and_is_back_within_the_read_lease(
    cluster: tuple[str, Masters],
) -> None:
    address, masters = cluster
    failing, other = 0, 1
    wrong: list[str]
    back: float | None
    watches = [LeaderWatch([a for _, a in masters[s]]) for s in (0, 1)]
    keys = [f"before/{i}" for i in range(64)]
    with (
        Store.connect(etcd=address, cluster=CLUSTER, rpc_timeout=3.0) as reader,
        Store.connect(etcd=address, cluster=CLUSTER, rpc_timeout=3.0) as writing,
    ):
        assert isinstance(reader, ShardedStore) and isinstance(writing, ShardedStore)
        for part in reader.stores:
            wait_for_mounts(part, 1)
        assert reader.batch_put_from(keys, [value_of(k) for k in keys]) == [0] * len(keys)
        writer = Writer(writing)
        time.sleep(1.0)
        deleted = KeyDeleted(address, etcd_keys.leader_key(etcd_keys.shard_cluster(CLUSTER, failing, 2)))
        leader, _ = leader_of(masters[failing])
        leader.send_signal(signal.SIGKILL)
        leader.wait()
        killed = time.monotonic()
        missed, wrong, back = [0, 0], [], None  # per shard; keys read as other bytes; when all hit
        while back is None and time.monotonic() - killed < 20:
            got = read_uncached(reader, keys)
            for key, g in zip(keys, got, strict=True):
                if g is None:
                    missed[shard_of(key, 2)] += 1
                elif g != value_of(key):
                    wrong.append(key)
            if all(g is not None for g in got):
                back = time.monotonic() - killed
            time.sleep(0.02)
        deleted.close()
        time.sleep(0.5)  # (puts go on a while after the shard is back)
        writer.stop()
        lease_ended = None if deleted.at is None else deleted.at - killed
        print(
            f"shard {failing} killed: its keys hit again {_seconds(back)} later (leader_ttl "
            f"{DEFAULTS.leader_ttl} s, read lease {DEFAULTS.lease_ttl:g} s); etcd ended its lease "
            f"{_seconds(lease_ended)} after the kill"
        )
        assert wrong == [] and missed[other] == 0, (wrong, missed)
        assert missed[failing] > 0, "the shard's keys never missed: was its leader killed?"
        assert back is not None and back <= DEFAULTS.lease_ttl, back
        assert lease_ended is not None and back - lease_ended <= AFTER_THE_LEASE, (back, lease_ended)
        assert writer.failed_at[other] == [], "the other shard's puts failed"
        assert len(writer.acked[failing]) > 0 and len(writer.acked[other]) > 0
        assert [w.stop() for w in watches] == [1, 1]  # never two masters of one shard at once
        check_all_acknowledged(reader, writer)


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.3f} s"
