"""A cluster split over two shards without etcd (a static list, ';'-separated in shard order): two master
processes, one storage node process that joins both (a segment per shard), clients here that route each
key to its shard (kvstore.cluster.shards)."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pytest

from kvstore import MISS, Store
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.config import StoreConfig
from kvstore.errors import ObjectNotFoundError
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts

SEGMENT = 64 << 20


@dataclass
class TwoShards:
    masters: list[str]
    processes: list[subprocess.Popen[str]]
    node_line: str

    @property
    def address(self) -> str:
        return ";".join(self.masters)


@pytest.fixture
def two_shards() -> Iterator[TwoShards]:
    with ExitStack() as stack:
        masters, processes = [], []
        for shard in range(2):
            proc, ready = stack.enter_context(
                kvstore_process(["master", "--port", "0", "--shard", str(shard), "--shards", "2"])
            )
            masters.append(ready.split()[0])
            processes.append(proc)
        _, line = stack.enter_context(
            kvstore_process(["node", "--master", ";".join(masters), "--segment-size", str(SEGMENT)])
        )
        yield TwoShards(masters, processes, line)


def shard_alone(two_shards: TwoShards, master: str) -> Store:
    """A client of one shard's master alone (Store.connect(master) is refused: its routing would be one
    shard, the master serves one of two)."""
    config = StoreConfig.load(master=master)
    return Store.from_config(dataclasses.replace(config, shard=(two_shards.masters.index(master), 2)))


def value(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def keys_on_both(count: int) -> list[str]:
    keys = [f"shard-test/{i}" for i in range(count)]
    assert {shard_of(k, 2) for k in keys} == {0, 1}
    return keys


def test_the_node_mounts_half_its_memory_on_each_shard(two_shards: TwoShards) -> None:
    engines = two_shards.node_line.split()[0].split(",")
    assert len(engines) == 2 and engines[0] != engines[1]
    for master in two_shards.masters:
        with shard_alone(two_shards, master) as alone:
            wait_for_mounts(alone, 1)
            stats = alone.stats()["master"]
            assert stats["segments"] == 1 and stats["capacity"] == SEGMENT // 2


def test_put_get_exists_remove_through_both_shards_byte_exact(two_shards: TwoShards) -> None:
    keys = keys_on_both(40)
    values = [value(100 + 997 * i, i) for i in range(len(keys))]
    with Store.connect(two_shards.address) as store:
        assert isinstance(store, ShardedStore) and store.shards == 2
        assert store.config.master == two_shards.address  # (what a connector reads its settings from)
        wait_for_mounts(store.stores[0], 1)
        wait_for_mounts(store.stores[1], 1)
        assert store.batch_put_from(keys, values) == [0] * len(keys)
        store.put("single/one", b"one value")
        assert store.batch_get([*keys, "absent/key"]) == [*values, None]
        assert store.get("single/one") == b"one value"
        out = np.zeros((len(keys), max(map(len, values))), dtype=np.uint8)
        store.register_buffer(out)
        results = store.batch_get_into(keys, list(out))
        assert results == [len(v) for v in values]
        assert all(bytes(out[i, : len(v)]) == v for i, v in enumerate(values))
        assert store.batch_exists(["absent/key", *keys]) == [False] + [True] * len(keys)
        assert store.exists("single/one") and not store.exists("absent/key")

        # removal: keys no read has leased (a leased key is busy until its lease ends)
        gone = [f"removed/{i}" for i in range(8)]
        assert {shard_of(k, 2) for k in gone} == {0, 1}
        assert store.batch_put_from(gone, [b"r" * 100] * len(gone)) == [0] * len(gone)
        store.remove(gone[0])
        assert store.batch_remove([*gone[1:4], "absent/key"]) == [0, 0, 0, MISS]
        with pytest.raises(ObjectNotFoundError):
            store.remove(gone[0])
        assert store.batch_exists(gone) == [False] * 4 + [True] * 4
        assert store.batch_get(keys) == values


def test_piece_arrays_groups_and_locations_through_both_shards(two_shards: TwoShards) -> None:
    """The calls a connector makes: flat piece arrays cut by key, a group stored whole on its shard."""
    keys = keys_on_both(12)
    with Store.connect(two_shards.address) as store:
        wait_for_mounts(store.stores[0], 1)
        wait_for_mounts(store.stores[1], 1)
        src = np.frombuffer(value(12 * 3 * 256, 7), dtype=np.uint8).copy()
        dst = np.zeros_like(src)
        store.register_buffer(src)
        store.register_buffer(dst)
        counts = [1 + i % 3 for i in range(len(keys))]  # key i: its counts[i] next 256-byte pieces
        total = sum(counts)
        # pieces out of order in memory: piece j at offset (total - 1 - j) * 256
        offsets = [(total - 1 - j) * 256 for j in range(total)]
        addrs = [src.ctypes.data + o for o in offsets]
        assert store.batch_put_from_pieces(keys, addrs, [256] * total, counts) == [0] * len(keys)
        starts = np.cumsum(counts) - counts
        for i, key in enumerate(keys):
            expect = b"".join(bytes(src[o : o + 256]) for o in offsets[starts[i] : starts[i] + counts[i]])
            assert store.get(key) == expect
        back = [dst.ctypes.data + o for o in offsets]
        assert store.batch_get_into_pieces(keys, back, [256] * total, counts) == [256 * c for c in counts]
        assert bytes(dst[: total * 256]) == bytes(src[: total * 256])

        members = [value(1000 + i, 50 + i) for i in range(6)]
        assert store.put_group("a-group", members) == [0] * 6
        member_keys = [f"a-group#{i}of6" for i in range(6)]
        assert store.batch_get(member_keys) == members
        home = shard_of("a-group", 2)
        with shard_alone(two_shards, two_shards.masters[home]) as alone:
            assert alone.batch_exists(member_keys) == [True] * 6
        located = store.locate([*keys, "absent/key"])
        assert located[-1] is None and all(loc is not None and loc.size > 0 for loc in located[:-1])
        assert store.get_size(keys[0]) == 256 * counts[0]


def test_each_shard_holds_only_its_own_keys(two_shards: TwoShards) -> None:
    keys = keys_on_both(32)
    with Store.connect(two_shards.address) as store:
        wait_for_mounts(store.stores[0], 1)
        wait_for_mounts(store.stores[1], 1)
        assert store.batch_put_from(keys, [value(512, i) for i in range(len(keys))]) == [0] * len(keys)
    for shard, master in enumerate(two_shards.masters):
        with shard_alone(two_shards, master) as alone:  # one shard's master, asked directly
            assert alone.batch_exists(keys) == [shard_of(k, 2) == shard for k in keys]
            assert alone.stats()["master"]["objects"] == sum(shard_of(k, 2) == shard for k in keys)


def test_a_shard_that_is_down_makes_only_its_keys_fail(two_shards: TwoShards) -> None:
    keys = keys_on_both(24)
    values = [value(300, i) for i in range(len(keys))]
    down = [shard_of(k, 2) == 1 for k in keys]
    with Store.connect(two_shards.address, rpc_timeout=2.0) as store:
        wait_for_mounts(store.stores[0], 1)
        wait_for_mounts(store.stores[1], 1)
        assert store.batch_put_from(keys, values) == [0] * len(keys)
        two_shards.processes[1].kill()  # shard 1's master is gone: its address refuses
        two_shards.processes[1].wait()
        assert store.batch_get(keys) == [None if d else v for d, v in zip(down, values, strict=True)]
        assert store.batch_exists(keys) == [not d for d in down]
        codes = store.batch_put_from([f"{k}/again" for k in keys], values)
        for key, code in zip(keys, codes, strict=True):
            assert (code < 0) == (shard_of(f"{key}/again", 2) == 1)
    # status still shows the shard that answers, says which does not, and exits 1
    command = [sys.executable, "-m", "kvstore.cli", "status", "--master", two_shards.address, "--json"]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
    shown = json.loads(ran.stdout)["shards"]
    assert ran.returncode == 1 and shown[0]["master"]["address"] == two_shards.masters[0]
    assert "error" in shown[1] and "master" not in shown[1]


def test_status_shows_every_shard(two_shards: TwoShards) -> None:
    with Store.connect(two_shards.address) as store:
        wait_for_mounts(store.stores[0], 1)
        wait_for_mounts(store.stores[1], 1)
        keys = keys_on_both(10)
        assert store.batch_put_from(keys, [b"x" * 64] * len(keys)) == [0] * len(keys)
    command = [sys.executable, "-m", "kvstore.cli", "status", "--master", two_shards.address, "--json"]
    shown = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    shards = shown["shards"]
    assert [s["master"]["address"] for s in shards] == two_shards.masters
    assert [s["stats"]["objects"] for s in shards] == [sum(shard_of(k, 2) == i for k in keys) for i in (0, 1)]
    assert [s["stats"]["capacity"] for s in shards] == [SEGMENT // 2] * 2
    text = subprocess.run(command[:-1], capture_output=True, text=True, check=True).stdout
    assert "shard 0 of 2" in text and "shard 1 of 2" in text


def test_one_shards_master_restarted_is_rebuilt_from_the_nodes_holds_alone() -> None:
    """SIGKILL shard 1's only master and start it again on its address: the node, a member of both
    shards, names back to it what it holds for shard 1; shard 0 never notices. Every key reads back
    byte-exact, through the same client."""
    fast = ["--client-ttl", "10", "--heartbeat-interval", "0.3", "--shards", "2"]
    keys = keys_on_both(60)
    values = [value(1024 + 37 * i, i) for i in range(len(keys))]
    on_shard_1 = [k for k in keys if shard_of(k, 2) == 1]
    with ExitStack() as stack:
        procs, masters = [], []
        for shard in (0, 1):
            proc, ready = stack.enter_context(
                kvstore_process(["master", "--port", "0", "--shard", str(shard), *fast])
            )
            procs.append(proc)
            masters.append(ready.split()[0])
        stack.enter_context(
            kvstore_process(["node", "--master", ";".join(masters), "--segment-size", "64MiB"])
        )
        store = stack.enter_context(Store.connect(";".join(masters), rpc_timeout=3.0))
        for part in store.stores:
            wait_for_mounts(part, 1)
        assert store.batch_put_from(keys, values) == [0] * len(keys)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait()
        port = masters[1].rsplit(":", 1)[1]
        stack.enter_context(kvstore_process(["master", "--port", port, "--shard", "1", *fast]))
        deadline = time.monotonic() + 20
        while store.stores[1].stats()["master"]["objects"] < len(on_shard_1) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.stores[1].stats()["master"]["objects"] == len(on_shard_1)
        assert store.stores[0].stats()["master"]["objects"] == len(keys) - len(on_shard_1)
        for part in store.stores:
            part.leases.clear()
        assert store.batch_get(keys) == values


def test_a_client_that_contributes_memory_gives_each_shard_half(two_shards: TwoShards) -> None:
    """kvstore.Store with a segment_size on a sharded cluster: a storage node role per shard, each with
    an even part, beside the node process's."""
    with Store.connect(two_shards.address, segment_size=32 << 20) as store:
        for part in store.stores:
            wait_for_mounts(part, 2)
            assert part.stats()["master"]["capacity"] == SEGMENT // 2 + (16 << 20)
        keys = keys_on_both(16)
        assert store.batch_put_from(keys, [value(4096, i) for i in range(16)], replicas=2) == [0] * 16
        assert store.batch_get(keys) == [value(4096, i) for i in range(16)]
