"""A cluster split over two shards with a real etcd: each shard a leader and a standby elected under its
own name, the shard map in etcd, one storage node joined to both. Killing one shard's leader makes only
that shard's keys unavailable, never wrong, until its standby leads and the node's holds restore them;
the other shard's keys keep hitting throughout."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from kvstore import Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.config.security import SecurityConfig
from kvstore.errors import KVStoreError, MasterUnavailableError
from kvstore.procs import kvstore_process
from kvstore.rpc import etcd as etcd_keys
from kvstore.rpc.etcd_records import Records
from tests.integration.kvstore.conftest import wait_for_mounts
from tests.integration.kvstore.test_ha import HA, TTL, etcd_server, leader_of

CLUSTER = "sharded"
Masters = list[list[tuple[subprocess.Popen[str], str]]]  # per shard: (process, address) of each candidate


@pytest.fixture
def etcd_address(tmp_path: Path) -> Iterator[str]:
    with etcd_server(tmp_path, "127.0.0.1") as (address, _):
        yield address


def master_args(etcd: str, shard: int, shards: int = 2) -> list[str]:
    where = ["--etcd", etcd, "--cluster", CLUSTER, "--shard", str(shard), "--shards", str(shards)]
    return ["master", "--port", "0", *where, *HA]


@pytest.fixture
def sharded(etcd_address: str) -> Iterator[Masters]:
    """Two shards of two candidate masters each, and a node of 64 MiB (32 MiB per shard)."""
    with ExitStack() as stack:
        masters: Masters = [[], []]
        for shard in (0, 1):
            for _ in range(2):
                proc, ready = stack.enter_context(kvstore_process(master_args(etcd_address, shard)))
                masters[shard].append((proc, ready.split()[0]))
        node = ["node", "--etcd", etcd_address, "--cluster", CLUSTER, "--segment-size", "64MiB"]
        stack.enter_context(kvstore_process(node))
        yield masters


def value_of(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 256, 2048 + (i % 5) * 1024, dtype=np.uint8).tobytes()


def test_the_shard_map_is_signed_in_etcd_and_a_master_of_another_count_is_refused(
    etcd_address: str, sharded: Masters
) -> None:
    etcd = etcd_keys.connect(etcd_address, 1.0)
    key = etcd_keys.shards_key(CLUSTER)
    value, _ = etcd.get(key)
    assert Records(SecurityConfig.load().secret(), CLUSTER).decode_shards(value) == 2
    assert b'"mac"' in value  # (the suite's cluster has a secret)
    # who writes etcd without the secret cannot reroute keys: a client refuses a map that does not verify
    etcd.put(key, b'{"shards":3}')
    with pytest.raises(MasterUnavailableError, match=r"shard map .* does not verify"):
        Store.connect(etcd=etcd_address, cluster=CLUSTER, rpc_timeout=3.0)
    etcd.put(key, value)
    with (
        pytest.raises(KVStoreError, match="split over 2 shards in etcd, not 3"),
        kvstore_process(master_args(etcd_address, 0, shards=3)),
    ):
        pass


def test_killing_one_shards_leader_misses_only_its_keys_until_its_standby_restores_them(
    etcd_address: str, sharded: Masters
) -> None:
    keys = [f"failover/{i}" for i in range(48)]
    on = [shard_of(k, 2) for k in keys]
    assert set(on) == {0, 1}
    with Store.connect(etcd=etcd_address, cluster=CLUSTER, rpc_timeout=3.0) as store:
        assert isinstance(store, ShardedStore) and store.shards == 2
        for part in store.stores:
            wait_for_mounts(part, 1)
        assert store.batch_put_from(keys, [value_of(i) for i in range(len(keys))]) == [0] * len(keys)
        assert store.batch_get(keys) == [value_of(i) for i in range(len(keys))]

        leader, _ = leader_of(sharded[1])
        leader.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        leader.wait()
        wrong, other_shard_missed, own_missed, recovered_after = [], 0, 0, None
        while time.monotonic() - killed < 20:
            for part in store.stores:  # every read asks its shard's master (no leased location)
                part.leases.clear()
            got = store.batch_get(keys)
            own_missed += sum(g is None for g, shard in zip(got, on, strict=True) if shard == 1)
            for i, g in enumerate(got):
                if g is not None and g != value_of(i):
                    wrong.append(keys[i])
                elif g is None and on[i] == 0:
                    other_shard_missed += 1
            if all(g is not None for g in got):
                recovered_after = time.monotonic() - killed
                break
            time.sleep(0.1)
        assert wrong == [] and other_shard_missed == 0
        assert own_missed > 0, "shard 1's keys never missed: was its leader killed?"
        assert recovered_after is not None, "shard 1's keys did not come back within 20 s"
        assert recovered_after <= 3 * TTL + 2, recovered_after  # the lease ends, a standby leads, holds
        print(f"shard 1 failover: its keys hit again {recovered_after:.2f} s after its leader was killed")
        # the restored keys are the node's holds, named back to the new leader: byte-exact, uncached
        for part in store.stores:
            part.leases.clear()
        assert store.batch_get(keys) == [value_of(i) for i in range(len(keys))]
        fresh = [f"after/{i}" for i in range(16)]
        assert store.batch_put_from(fresh, [value_of(i) for i in range(16)]) == [0] * 16


def test_status_shows_each_shards_leader_and_epoch(etcd_address: str, sharded: Masters) -> None:
    command = [sys.executable, "-m", "kvstore.cli", "status", "--etcd", etcd_address, "--cluster", CLUSTER]
    shown = json.loads(
        subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout
    )
    leaders = [leader_of(sharded[shard])[1] for shard in (0, 1)]
    assert [s["master"]["address"] for s in shown["shards"]] == leaders
    assert [s["master"]["cluster"] for s in shown["shards"]] == [f"{CLUSTER}.shard-0", f"{CLUSTER}.shard-1"]
    assert all(s["master"]["epoch"] > 0 for s in shown["shards"])
