"""The review's F10, on a real node and a real 8 MiB tmpfs: a 7 MiB segment (accepted: it and the 1 MiB
its catalog is given fit) taking 20,000 values of 256 B (it holds 4,096 at a time, the rest evicted) wrote
its catalog's log past that 1 MiB within seconds, the catalog fell back to memory (what the node holds
no longer survives its restart) and nothing but one log line said so. Now the log is compacted within
its room: no such line, and the catalog file is there, within the room, at the end. And a start refused
for want of room (16 MiB there) leaves no segment file behind (it left a 0-byte .mem). Mounting a tmpfs
needs root: skipped otherwise."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from kvstore import Store
from kvstore.node.segment_memory import CATALOG_ROOM
from tests.conftest import tiny_tmpfs
from tests.integration.kvstore.test_a_memory_dir_without_room import master, node


def test_churn_on_a_small_tmpfs_keeps_the_catalog_written(tmp_path: Path) -> None:
    with (
        tiny_tmpfs(tmp_path / "small", "8m") as fs,
        master() as m,
        node(m.address, fs, tmp_path / "node.err", "7MiB") as proc,
    ):
        assert proc.poll() is None, (tmp_path / "node.err").read_text()
        rng = np.random.default_rng(3)
        with Store.connect(m.address) as store:
            for batch in range(40):
                keys = [f"churn{batch}/{i}" for i in range(500)]
                values = [rng.integers(0, 255, 256, dtype=np.uint8) for _ in keys]
                store.batch_put_from(keys, values)  # (the segment keeps 4,096: the rest evict)
            last = keys
            time.sleep(1.0)  # the node records its holds after the puts return
            assert all(store.get(k) == v.tobytes() for k, v in zip(last, values, strict=True))
        assert proc.poll() is None
        said = (tmp_path / "node.err").read_text()
        assert "cannot write the catalog" not in said, said
        (catalog,) = fs.glob("kvstore-*/*.held")  # still written (a catalog given up is removed)
        assert 0 < catalog.stat().st_size <= CATALOG_ROOM


def test_a_start_refused_for_room_leaves_no_segment_file(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "small", "8m") as fs, master() as m:
        with node(m.address, fs, tmp_path / "node.err", "16MiB") as proc:
            assert proc.wait(timeout=60) == 1
        assert "too little for a 16MiB segment" in (tmp_path / "node.err").read_text()
        assert list(fs.glob("kvstore-*/*.mem")) == []
