"""A node of a cluster split over two shards starts while one shard's master is down: it serves the shard
that answers at once (ready, its half of the memory mounted there), `kvstore status` names the shard that
does not answer, and once that master starts the node joins it on its own (retried with a growing pause)
and both shards store and read back byte-exact. Before: the node exited at start."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
from contextlib import ExitStack

import numpy as np

from kvstore import Store
from kvstore.cluster.shards import shard_of
from kvstore.config import StoreConfig
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts

SEGMENT = 64 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shard_alone(address: str, shard: int) -> Store:
    """A client of one shard's master alone (it serves shard `shard` of 2)."""
    return Store.from_config(dataclasses.replace(StoreConfig.load(master=address), shard=(shard, 2)))


def _status(masters: str) -> tuple[int, list[dict]]:
    command = [sys.executable, "-m", "kvstore.cli", "status", "--master", masters, "--json", "--timeout", "2"]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=60)
    return ran.returncode, json.loads(ran.stdout)["shards"]


def test_a_node_serves_the_shard_that_answers_and_joins_the_other_once_it_starts() -> None:
    with ExitStack() as stack:
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--shard", "0", "--shards", "2"])
        )
        first, later = ready.split()[0], f"127.0.0.1:{_free_port()}"
        masters = f"{first};{later}"
        started = time.monotonic()
        _, line = stack.enter_context(
            kvstore_process(["node", "--master", masters, "--segment-size", str(SEGMENT)])
        )
        engines = line.split()[0].split(",")
        assert len(engines) == 2 and engines[0] != "-" and engines[1] == "-", line
        with _shard_alone(first, 0) as shard0:
            wait_for_mounts(shard0, 1)
            assert shard0.stats()["master"]["capacity"] == SEGMENT // 2
            code, shown = _status(masters)
            assert code == 1 and shown[0]["master"]["address"] == first, shown
            assert "error" in shown[1] and later in shown[1]["error"], shown[1]

        port = later.rsplit(":", 1)[1]
        stack.enter_context(kvstore_process(["master", "--port", port, "--shard", "1", "--shards", "2"]))
        back = time.monotonic()
        with _shard_alone(later, 1) as shard1:
            wait_for_mounts(shard1, 1, timeout=30)  # (the retries' pause grows to 10 s at most)
            joined_after = time.monotonic() - back
            assert shard1.stats()["master"]["capacity"] == SEGMENT // 2
        print(
            f"the node joined shard 1 {joined_after:.2f} s after its master started "
            f"({back - started:.1f} s after the node)"
        )

        keys = [f"later/{i}" for i in range(40)]
        assert {shard_of(k, 2) for k in keys} == {0, 1}
        values = [
            np.random.default_rng(i).integers(0, 256, 3000 + i, dtype=np.uint8).tobytes() for i in range(40)
        ]
        with Store.connect(masters) as store:
            assert store.batch_put_from(keys, values) == [0] * len(keys)
            for part in store.stores:
                part.leases.clear()
            assert store.batch_get(keys) == values
        code, shown = _status(masters)
        assert code == 0 and [s["master"]["address"] for s in shown] == [first, later]
