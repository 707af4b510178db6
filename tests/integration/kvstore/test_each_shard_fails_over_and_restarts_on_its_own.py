"""The HA and restart tests, per shard (issue 42 section 3): a cluster split over two shards with a real
etcd, each shard a leader and a standby elected under its own name, one storage node joined to both, a
client putting over both shards all along.

- One shard's leader killed (SIGKILL) or stopped (SIGTERM): only that shard's keys miss, for about the
  leader's lease (SIGKILL: the lease must end first) or less (SIGTERM: the leader resigns its lease);
  then its standby leads, the node names its holds back, and every object acknowledged before reads back
  byte-exact. The other shard's keys never miss and its puts never fail; no read returns other bytes; no
  two masters of one shard ever serve at once.
- One shard's every master killed, then a fresh master started for it: meanwhile the other shard serves
  as before; the fresh master rebuilds its shard from the node's holds alone.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import xxhash

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.errors import KVStoreError
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_ha import HA, TTL, LeaderWatch, etcd_server, leader_of

CLUSTER = "pershard"
Candidates = list[tuple[subprocess.Popen[str], str]]


@dataclass
class Cluster:
    etcd: str
    stack: ExitStack
    masters: list[Candidates] = field(default_factory=lambda: [[], []])

    def start_master(self, shard: int) -> None:
        where = ["--etcd", self.etcd, "--cluster", CLUSTER, "--shard", str(shard), "--shards", "2"]
        proc, ready = self.stack.enter_context(kvstore_process(["master", "--port", "0", *where, *HA]))
        self.masters[shard].append((proc, ready.split()[0]))

    def connect(self) -> ShardedStore:
        store = Store.connect(etcd=self.etcd, cluster=CLUSTER, rpc_timeout=3.0)
        assert isinstance(store, ShardedStore) and store.shards == 2
        return store


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Two shards of two candidate masters each, and a node of 64 MiB (32 MiB per shard)."""
    with etcd_server(tmp_path, "127.0.0.1") as (address, _), ExitStack() as stack:
        running = Cluster(address, stack)
        for shard in (0, 1):
            for _ in range(2):
                running.start_master(shard)
        node = ["node", "--etcd", address, "--cluster", CLUSTER, "--segment-size", "64MiB"]
        stack.enter_context(kvstore_process(node))
        yield running


def value_of(key: str) -> bytes:
    seed = xxhash.xxh3_64_intdigest(key.encode())
    return np.random.default_rng(seed).integers(0, 256, 2048 + seed % 4096, dtype=np.uint8).tobytes()


class Writer:
    """Puts 8 new keys a batch over both shards on a thread until stopped: per shard, the keys
    acknowledged, and the times of puts that failed."""

    def __init__(self, store: ShardedStore) -> None:
        self.store, self.acked, self.failed_at = store, [[], []], [[], []]  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            keys = [f"w/{j}" for j in range(i, i + 8)]
            i += 8
            try:
                codes = self.store.batch_put_from(keys, [value_of(k) for k in keys])
            except KVStoreError:
                codes = [-1] * len(keys)
            now = time.monotonic()
            for key, code in zip(keys, codes, strict=True):
                shard = shard_of(key, 2)
                (self.acked[shard].append(key) if code == 0 else self.failed_at[shard].append(now))
            time.sleep(0.02)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def read_uncached(store: ShardedStore, keys: list[str]) -> list[bytes | None]:
    for part in store.stores:  # every read asks its shard's master (no leased location)
        part.leases.clear()
    got: list[bytes | None] = []
    for at in range(0, len(keys), 64):
        got += store.batch_get(keys[at : at + 64])
    return got


@dataclass
class Outage:
    """What a reader saw of both shards from one shard's failure on."""

    missed: list[int] = field(default_factory=lambda: [0, 0])  # per shard, reads that missed
    wrong: list[str] = field(default_factory=list)
    back_after: float | None = None  # seconds until every key of the failed shard hit again


def watch_outage(store: ShardedStore, keys: list[str], since: float, seconds: float) -> Outage:
    """Reads `keys` (uncached) every 0.1 s until every one hits again, at most `seconds`."""
    outage = Outage()
    while time.monotonic() - since < seconds:
        got = read_uncached(store, keys)
        for key, g in zip(keys, got, strict=True):
            if g is None:
                outage.missed[shard_of(key, 2)] += 1
            elif g != value_of(key):
                outage.wrong.append(key)
        if all(g is not None for g in got):
            outage.back_after = time.monotonic() - since
            return outage
        time.sleep(0.1)
    return outage


def check_all_acknowledged(store: ShardedStore, writer: Writer) -> None:
    """Every object acknowledged, on either shard, reads back byte-exact (uncached)."""
    acked = writer.acked[0] + writer.acked[1]
    got = read_uncached(store, acked)
    lost = [k for k, g in zip(acked, got, strict=True) if g != value_of(k)]
    assert lost == [], (len(lost), len(acked), lost[:5])


@pytest.mark.parametrize(
    ("how", "bound"),
    [(signal.SIGKILL, TTL + 2.5), (signal.SIGTERM, TTL)],
    ids=["killed", "stopped"],
)
def test_one_shards_leader_fails_and_only_its_keys_miss_until_its_standby_leads(
    cluster: Cluster, how: signal.Signals, bound: float
) -> None:
    """The outage is timed from the leader's exit (a stopped leader resigns, then exits): a killed
    leader's keys must miss (its lease holds on), a stopped one's may not (its standby may lead first)."""
    failing, other = 0, 1
    watches = [LeaderWatch([a for _, a in cluster.masters[s]]) for s in (0, 1)]
    keys = [f"before/{i}" for i in range(64)]
    with cluster.connect() as reader, cluster.connect() as writing:
        for part in reader.stores:
            wait_for_mounts(part, 1)
        assert reader.batch_put_from(keys, [value_of(k) for k in keys]) == [0] * len(keys)
        writer = Writer(writing)
        time.sleep(1.0)
        leader, _ = leader_of(cluster.masters[failing])
        leader.send_signal(how)
        leader.wait()
        failed = time.monotonic()
        outage = watch_outage(reader, keys, failed, 20)
        time.sleep(0.5)  # (puts go on a while after the shard is back)
        writer.stop()
        print(f"shard {failing} {how.name}: its keys hit again {outage.back_after} s later (lease {TTL} s)")
        assert outage.wrong == [] and outage.missed[other] == 0, outage
        if how == signal.SIGKILL:
            assert outage.missed[failing] > 0, "the shard's keys never missed: was its leader killed?"
        assert outage.back_after is not None and outage.back_after <= bound, outage.back_after
        assert writer.failed_at[other] == [], "the other shard's puts failed"
        assert len(writer.acked[failing]) > 0 and len(writer.acked[other]) > 0
        assert [w.stop() for w in watches] == [1, 1]  # never two masters of one shard at once
        check_all_acknowledged(reader, writer)


def test_one_shard_restarted_from_nothing_but_the_nodes_holds_while_the_other_serves(
    cluster: Cluster,
) -> None:
    down, other = 1, 0
    keys = [f"held/{i}" for i in range(64)]
    with cluster.connect() as reader, cluster.connect() as writing:
        for part in reader.stores:
            wait_for_mounts(part, 1)
        assert reader.batch_put_from(keys, [value_of(k) for k in keys]) == [0] * len(keys)
        writer = Writer(writing)
        time.sleep(1.0)
        for proc, _ in cluster.masters[down]:  # every master of the shard: no standby to lead
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        killed = time.monotonic()
        time.sleep(TTL + 1)  # the shard is down past its leader's lease
        during = read_uncached(reader, keys)
        assert all((g is None) == (shard_of(k, 2) == down) for k, g in zip(keys, during, strict=True))
        cluster.start_master(down)  # a fresh master: its shard's objects are the node's holds alone
        outage = watch_outage(reader, keys, killed, 30)
        writer.stop()
        print(f"shard {down} restarted: its keys hit again {outage.back_after} s after its masters died")
        assert outage.wrong == [] and outage.missed[other] == 0, outage
        assert outage.back_after is not None, "the restarted shard's keys did not come back"
        assert writer.failed_at[other] == [], "the other shard's puts failed"
        check_all_acknowledged(reader, writer)
        fresh = [f"after/{i}" for i in range(16)]
        assert writing.batch_put_from(fresh, [value_of(k) for k in fresh]) == [0] * 16
