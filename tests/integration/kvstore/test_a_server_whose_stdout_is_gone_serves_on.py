"""A server whose stdout is a pipe nobody reads any more (`kvstore node ... | head -1` once head has
exited) died of a BrokenPipeError at its READY line, after it had joined: the node left its segment,
catalog, key and lock files behind and the master kept its registration until the client TTL (review
F15). Now the READY line's failed write is said once in the log and the server serves on; a node stopped
with SIGTERM then leaves as it should, taking its files with it. Real master and node processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from kvstore import Store


def test_a_node_whose_stdout_is_closed_serves_and_leaves_cleanly(tmp_path: Path) -> None:
    master = subprocess.Popen(
        [sys.executable, "-m", "kvstore.cli", "master", "--port", "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "KVSTORE_LIFELINE": "stdin"},
    )
    node = None
    memory_dir = tmp_path / "memory"
    memory_dir.mkdir(mode=0o700)
    try:
        assert master.stdout is not None
        address = master.stdout.readline().split()[1]
        read, write = os.pipe()
        os.close(read)  # (the reader is gone before the node writes a line: head -1 exited)
        with open(tmp_path / "node.err", "w") as err:
            args = ["node", "--master", address, "--segment-size", "16MiB", "--memory-dir", str(memory_dir)]
            node = subprocess.Popen([sys.executable, "-m", "kvstore.cli", *args], stdout=write, stderr=err)
        os.close(write)
        value = np.arange(1 << 16, dtype=np.uint8)
        with Store.connect(address) as store:
            deadline = time.monotonic() + 60
            while store.batch_put_from(["k"], [value]) != [0]:  # (until the node has joined)
                assert node.poll() is None, (tmp_path / "node.err").read_text()
                assert time.monotonic() < deadline, "the node never took a put"
                time.sleep(0.2)
            time.sleep(1.0)  # past its READY line
            assert node.poll() is None, (tmp_path / "node.err").read_text()
            assert store.get("k") == value.tobytes()
            said = (tmp_path / "node.err").read_text()
            assert "stdout is gone" in said and "serving on" in said, said
            assert list(memory_dir.glob("**/*.mem"))  # (its segment is a file there)
            node.send_signal(signal.SIGTERM)
            assert node.wait(timeout=30) == 0, (tmp_path / "node.err").read_text()
        assert list(memory_dir.glob("**/*.mem")) == []
        assert list(memory_dir.glob("**/*.held")) == []
    finally:
        if node is not None and node.poll() is None:
            node.kill()
            node.wait()
        assert master.stdin is not None
        master.stdin.close()
        master.wait(timeout=30)
