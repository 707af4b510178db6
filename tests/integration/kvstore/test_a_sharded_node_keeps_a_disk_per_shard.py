"""A node of a cluster split over two shards keeps a disk tier per shard (before: refused): its --disk
file becomes '<path>.shard-0' and '<path>.shard-1', each half of --disk-size, so each shard demotes its
own cold objects to its own file and reads them back verified; a block device, which cannot be split, is
refused naming the way out."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from kvstore import Store
from kvstore.cluster.shards import shard_of
from kvstore.config import NodeConfig
from kvstore.errors import InvalidArgumentError
from kvstore.node.process import _shard_node
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts

VALUE = 256 << 10


def test_each_shard_demotes_to_its_own_file_and_reads_back_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # half of each shard's (tiny) memory kept backed by disk, as test_disk_tier's cluster does
    monkeypatch.setenv("KVSTORE_MASTER_DEMOTE_WATERMARK", "0.5")
    disk = tmp_path / "tier"
    with ExitStack() as stack:
        masters = []
        for shard in range(2):
            args = [
                "master",
                "--port",
                "0",
                "--shard",
                str(shard),
                "--shards",
                "2",
                "--heartbeat-interval",
                "0.3",
            ]
            _, ready = stack.enter_context(kvstore_process(args))
            masters.append(ready.split()[0])
        node = ["node", "--master", ";".join(masters), "--segment-size", "32MiB"]
        _, line = stack.enter_context(kvstore_process([*node, "--disk", str(disk), "--disk-size", "256MiB"]))
        assert line.split()[-2:] == ["restored=0,0", "dropped=0,0"], line
        assert [(tmp_path / f"tier.shard-{i}").stat().st_size for i in (0, 1)] == [128 << 20] * 2
        assert not disk.exists()
        data = [np.random.default_rng(i).integers(0, 256, VALUE, dtype=np.uint8) for i in range(160)]
        keys = [f"tier/{i}" for i in range(len(data))]  # 40 MiB through 2 x 16 MiB of memory
        with Store.connect(";".join(masters), rpc_busy_poll_us=0) as store:
            for part in store.stores:
                wait_for_mounts(part, 1)
            for i in range(0, len(keys), 8):
                assert store.batch_put_from(keys[i : i + 8], data[i : i + 8]) == [0] * 8
                time.sleep(0.05)  # (demotion keeps ahead of eviction)
            stats = [part.stats()["master"] for part in store.stores]
            for shard, s in enumerate(stats):
                assert s["objects"] == sum(shard_of(k, 2) == shard for k in keys)
                assert s["evictions"] > 10 and s["evictions_to_disk"] == s["evictions"]  # none lost
                assert s["disk_objects"] >= s["evictions"]
            for i in range(0, len(keys), 16):
                assert store.batch_get(keys[i : i + 16]) == [v.tobytes() for v in data[i : i + 16]], i
            assert all(part.stats_local.checksum_mismatches == 0 for part in store.stores)


def test_a_block_device_is_not_split_over_shards() -> None:
    node = NodeConfig.load(segment_size=64 << 20, disk="/dev/null", disk_size=1 << 30)  # (a char device)
    assert _shard_node(node, 1, 2).disk == "/dev/null.shard-1"  # (not a block device: named beside)
    devices = [p for p in Path("/dev").iterdir() if p.is_block_device()]
    if not devices:
        pytest.skip("no block device here to name")
    node = NodeConfig.load(segment_size=64 << 20, disk=str(devices[0]), disk_size=0)
    with pytest.raises(InvalidArgumentError, match="block device, which a node of 2 shards cannot split"):
        _shard_node(node, 0, 2)
