"""A node that joins a nearly full cluster is not flooded with writes (issue 42, section 4), with real
processes: a master, four nodes of 32 MiB filled to 90%, then a fifth node joins while a client puts at
a steady pace for 10 s. The master's placement (the roomier of two segments drawn among those that fit)
gives the newcomer at most twice its fair share (1/5); "the emptiest first" gave it every write."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack

import numpy as np

from kvstore import Store
from kvstore.procs import kvstore_process

from .conftest import wait_for_mounts

SEGMENT_MIB = 32
VALUE = 8 << 10  # 4,096 a segment: a share measured over 2,000 puts, not a few draws
BATCH, PERIOD, WINDOW = 20, 0.1, 10.0  # 200 puts a second: 16 MiB in the window, less than the room left


def _values(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, VALUE, dtype=np.uint8) for _ in range(n)]


def _put(store: Store, keys: list[str], seed: int) -> None:
    assert store.batch_put_from(keys, _values(len(keys), seed)) == [0] * len(keys)


def test_a_node_joining_a_nearly_full_cluster_takes_at_most_twice_its_fair_share() -> None:
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(["master", "--port", "0"]))
        master = ready.split()[0]
        node = ["node", "--master", master, "--segment-size", f"{SEGMENT_MIB}MiB"]
        for _ in range(4):
            stack.enter_context(kvstore_process(node))
        store = stack.enter_context(Store.connect(master))
        wait_for_mounts(store, 4)
        fill = int(4 * (SEGMENT_MIB << 20) * 0.9) // VALUE
        for first in range(0, fill, 500):
            _put(store, [f"old{i}" for i in range(first, min(first + 500, fill))], first)
        assert 0.89 <= store.stats()["master"]["used"] / (4 * (SEGMENT_MIB << 20)) <= 0.91

        _, info = stack.enter_context(kvstore_process(node))
        newcomer = info.split()[0]  # its engine's name, as locations give it
        wait_for_mounts(store, 5)
        keys: list[str] = []
        start = time.monotonic()
        while time.monotonic() < start + WINDOW:
            batch = [f"new{len(keys) + i}" for i in range(BATCH)]
            _put(store, batch, len(keys))
            keys += batch
            time.sleep(max(0.0, start + len(keys) / BATCH * PERIOD - time.monotonic()))
        assert len(keys) >= 1000, f"only {len(keys)} puts in {WINDOW} s"

        engines = Counter(loc.locations[0].engine for loc in store.locate(keys) if loc is not None)
        assert sum(engines.values()) == len(keys) and len(engines) == 5, engines
        share = engines[newcomer] / len(keys)
        assert share <= 2 / 5, f"the newcomer took {share:.0%} of {len(keys)} writes: {engines}"
