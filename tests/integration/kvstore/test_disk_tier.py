"""The disk tier with real processes: a node with a small memory segment over a disk file. Cold objects
are demoted ahead of eviction, evicting them keeps them on disk, reading them loads them back verified;
a corrupt record is a miss, never bytes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from kvstore import Store
from kvstore.config import MasterConfig
from kvstore.master import Master
from kvstore.master.server import EmbeddedMaster
from kvstore.procs import kvstore_process

VALUE = 256 << 10


@dataclass
class DiskCluster:
    master: EmbeddedMaster  # in this process: the test can look at where records are
    disk: Path
    ready: str


@pytest.fixture
def disk_cluster(tmp_path: Path) -> Iterator[DiskCluster]:
    master = Master.start_in_thread(MasterConfig.load(port=0, heartbeat_interval=0.3, busy_poll_us=0))
    disk = tmp_path / "tier"
    try:
        with ExitStack() as stack:
            node = ["node", "--master", master.address, "--segment-size", "16MiB"]
            _, ready = stack.enter_context(
                kvstore_process([*node, "--disk", str(disk), "--disk-size", "128MiB"])
            )
            yield DiskCluster(master, disk, ready)
    finally:
        master.stop()


def values(n: int) -> list[np.ndarray]:
    return [np.random.default_rng(i).integers(0, 256, VALUE, dtype=np.uint8) for i in range(n)]


def test_cold_objects_move_to_disk_and_read_back_exactly(disk_cluster: DiskCluster) -> None:
    assert disk_cluster.ready.split()[-1] in ("disk=io_uring", "disk=threads")
    data = values(160)  # 40 MiB through 16 MiB of memory
    keys = [f"tier/{i}" for i in range(len(data))]
    with Store.connect(disk_cluster.master.address, rpc_busy_poll_us=0) as store:
        for i in range(0, len(keys), 8):
            assert store.batch_put_from(keys[i : i + 8], data[i : i + 8]) == [0] * 8
            time.sleep(0.05)  # puts at ~40 MB/s: demotion keeps ahead of eviction
        stats = store.stats()["master"]
        assert stats["evictions"] > 60 and stats["evictions_to_disk"] == stats["evictions"]  # none lost
        assert stats["objects"] == len(keys) and stats["disk_objects"] >= stats["evictions"]
        for i in range(0, len(keys), 16):  # the oldest first: they are on disk only
            got = store.batch_get(keys[i : i + 16])
            assert got == [v.tobytes() for v in data[i : i + 16]], f"batch at {i}"
        stats = store.stats()["master"]
        assert stats["loads"] >= 60 and stats["load_failures"] == 0
        assert store.stats_local.checksum_mismatches == 0


def test_a_corrupt_record_is_a_miss_never_bytes(disk_cluster: DiskCluster) -> None:
    data = values(96)
    keys = [f"bad/{i}" for i in range(len(data))]
    state = disk_cluster.master.master.state
    with Store.connect(disk_cluster.master.address, rpc_busy_poll_us=0) as store:
        for i in range(0, len(keys), 8):
            assert store.batch_put_from(keys[i : i + 8], data[i : i + 8]) == [0] * 8
            time.sleep(0.05)
        on_disk_only = [
            k for k in keys if state.objects[k].disk is not None and not state.objects[k].replicas
        ]
        assert len(on_disk_only) >= 10
        torn, flipped = on_disk_only[0], on_disk_only[1]
        with open(disk_cluster.disk, "r+b") as f:
            f.seek(state.objects[torn].disk.offset + 4096 + 1000)  # the object's bytes
            f.write(b"\xee" * 64)
            f.seek(state.objects[flipped].disk.offset + 20)  # its header
            f.write(b"\x01")
        before = state.disk.load_failures
        assert store.batch_get([torn, flipped]) == [None, None]
        assert state.disk.load_failures == before + 2
        good = on_disk_only[2]
        assert store.get(good) == data[keys.index(good)].tobytes()  # its neighbours are fine
