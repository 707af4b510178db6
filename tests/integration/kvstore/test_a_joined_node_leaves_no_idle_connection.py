"""A node's joining thread opened a connection to the master, joined on it, and never used it again: the
master cut it at its idle_timeout (5 min) with a WARNING per node, and the node's end sat in CLOSE_WAIT
for the rest of its life (review F16). The node now closes that connection once it has joined (it opens
another only to leave). A real master (idle_timeout 2 s) and node: past several idle timeouts, the master
logged no cut, and the node still serves and leaves cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from kvstore import Store

IDLE = 2.0
NODE = ["--segment-size", "16MiB", "--memory-dir", ""]


def test_a_joined_node_leaves_no_connection_for_the_master_to_cut(tmp_path: Path) -> None:
    env = {**os.environ, "KVSTORE_LIFELINE": "stdin"}
    master_env = {**env, "KVSTORE_MASTER_IDLE_TIMEOUT": str(IDLE), "KVSTORE_MASTER_HEARTBEAT_INTERVAL": "0.3"}
    with open(tmp_path / "master.err", "w") as err:
        master = subprocess.Popen(
            [sys.executable, "-m", "kvstore.cli", "master", "--port", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=master_env,
        )
    node = None
    try:
        assert master.stdout is not None
        ready = master.stdout.readline().split()
        assert ready and ready[0] == "READY", (tmp_path / "master.err").read_text()
        address = ready[1]
        node = subprocess.Popen(
            [sys.executable, "-m", "kvstore.cli", "node", "--master", address, *NODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert node.stdout is not None
        assert node.stdout.readline().startswith("READY ")
        time.sleep(3 * IDLE + 1)  # several idle timeouts, the master's sweep included
        said = (tmp_path / "master.err").read_text()
        assert "idle for more than" not in said, said
        value = np.arange(1 << 16, dtype=np.uint8)
        with Store.connect(address) as store:
            assert store.batch_put_from(["k"], [value]) == [0]
            assert store.get("k") == value.tobytes()
        assert node.stdin is not None
        node.stdin.close()
        assert node.wait(timeout=30) == 0  # its leave opens a connection of its own
    finally:
        if node is not None and node.poll() is None:
            node.kill()
            node.wait()
        assert master.stdin is not None
        master.stdin.close()
        master.wait(timeout=30)
