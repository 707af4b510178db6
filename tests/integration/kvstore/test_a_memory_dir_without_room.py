"""A node's memory dir without room for its segment (a small tmpfs; Docker's 64 MiB /dev/shm): the node
went on silently in anonymous memory, which a restart loses, and its catalog in the full directory printed
an error line per write batch. Now it refuses at start, saying the room there, the segment's size and the
ways out (--memory-dir '' among them, which is still taken); and a catalog whose file system fills later
says so once and goes on in memory (its file removed), never a line per batch. Real node processes on a
real tmpfs (mounting one needs root: skipped otherwise)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from kvstore import Store
from kvstore.config import MasterConfig
from kvstore.master import Master
from kvstore.master.wire.server import EmbeddedMaster
from tests.conftest import tiny_tmpfs

SEGMENT = "16MiB"


@contextlib.contextmanager
def master() -> Iterator[EmbeddedMaster]:
    embedded = Master.start_in_thread(MasterConfig.load(port=0, heartbeat_interval=0.3, busy_poll_us=0))
    try:
        yield embedded
    finally:
        embedded.stop()


@contextlib.contextmanager
def node(
    address: str, memory_dir: str | Path, log: Path, segment: str = SEGMENT
) -> Iterator[subprocess.Popen[str]]:
    """`kvstore node` with its stderr in `log`; yields it once it is ready (or has exited)."""
    with open(log, "w") as err:
        args = ["node", "--master", address, "--segment-size", segment, "--memory-dir", str(memory_dir)]
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvstore.cli", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "KVSTORE_LIFELINE": "stdin"},
        )
        try:
            assert proc.stdout is not None
            proc.stdout.readline()  # READY ..., or nothing when it exits
            yield proc
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_a_memory_dir_without_room_is_refused_at_start(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "small", "8m") as fs, master() as m:
        with node(m.address, str(fs), tmp_path / "node.err") as proc:
            assert proc.wait(timeout=60) == 1
        said = (tmp_path / "node.err").read_text().strip().splitlines()
        assert len(said) == 1, said
        assert said[0].startswith(f"kvstore: error: the memory dir's file system ({fs}/kvstore-")
        assert "has 8MiB free, too little for a 16MiB segment and its catalog" in said[0]
        assert "--memory-dir '' for anonymous memory, which a restart of the node loses" in said[0]
        # the way out it names: anonymous memory, chosen
        with node(m.address, "", tmp_path / "anonymous.err") as proc:
            assert proc.poll() is None
            with Store.connect(m.address) as store:
                value = np.random.default_rng(1).integers(0, 255, 1 << 16, dtype=np.uint8)
                assert store.batch_put_from(["k"], [value]) == [0]
                assert store.get("k") == value.tobytes()


def test_a_catalog_whose_file_system_fills_says_so_once(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "small", "20m") as fs, master() as m:
        with node(m.address, str(fs), tmp_path / "node.err") as proc:
            assert proc.poll() is None, (tmp_path / "node.err").read_text()
            catalogs = list(fs.glob("kvstore-*/*.held"))
            assert len(catalogs) == 1
            with contextlib.suppress(OSError), open(fs / "filler", "wb") as filler:
                while True:  # every byte the segment's file left
                    filler.write(b"\0" * 65536)
                    filler.flush()
            rng = np.random.default_rng(2)
            written: dict[str, bytes] = {}
            with Store.connect(m.address) as store:
                for batch in range(60):  # small values: the catalog needs more than the page it had
                    keys = [f"b{batch}/{i}" for i in range(16)]
                    values = [rng.integers(0, 255, 4 << 10, dtype=np.uint8) for _ in keys]
                    assert store.batch_put_from(keys, values) == [0] * 16
                    written.update({k: v.tobytes() for k, v in zip(keys, values, strict=True)})
                time.sleep(1.0)  # the node records its holds after the puts return
                assert all(store.get(k) == v for k, v in written.items())  # served from memory
            assert proc.poll() is None
        said = (tmp_path / "node.err").read_text()
        complaints = [line for line in said.splitlines() if "catalog" in line]
        assert len(complaints) == 1, said  # was one per batch
        assert "will not survive its restart; the catalog is kept in memory from now on" in complaints[0]
        assert not catalogs[0].exists()  # (a file missing records could name removed objects)
