"""One suite over every tier a storage node contributes (kvstore.node.tiers.NodeTier: its memory segment,
its disk): a node SIGKILLed and started again with the same command line verifies what each tier holds
and names it back, so every intact copy is read back with the right bytes, and a copy damaged while the
node was down is a miss, never data. Real processes: a master in this process, the node in its own."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from kvstore import Store
from kvstore.master.ledger.objects import ObjectMeta
from kvstore.procs import kvstore_process
from kvstore.rpc.disk_record import data_offset
from tests.integration.kvstore.conftest import master_for_a_disk_node


def _only_in_memory(meta: ObjectMeta) -> bool:
    return bool(meta.replicas) and meta.disk is None


def _only_on_disk(meta: ObjectMeta) -> bool:
    return not meta.replicas and meta.disk is not None


def _memory_byte(meta: ObjectMeta, files: dict[str, Path]) -> tuple[Path, int]:
    return files["memory"], meta.replicas[0].offset + meta.size // 2


def _disk_byte(meta: ObjectMeta, files: dict[str, Path]) -> tuple[Path, int]:
    assert meta.disk is not None
    return files["disk"], data_offset(meta.disk.offset) + meta.size // 2


# Per tier: which objects have their only copy there, and where one of their bytes lies in its file.
Holds = Callable[[ObjectMeta], bool]
Where = Callable[[ObjectMeta, dict[str, Path]], tuple[Path, int]]
TIERS: dict[str, tuple[Holds, Where]] = {
    "memory": (_only_in_memory, _memory_byte),
    "disk": (_only_on_disk, _disk_byte),
}


def test_every_tier_names_back_its_intact_copies_after_a_restart_and_a_damaged_one_is_a_miss(
    node_memory_dir: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    data = [rng.integers(0, 256, int(n) * 1024, dtype=np.uint8) for n in rng.integers(96, 256, 120)]
    keys = [f"tiers/{i}" for i in range(len(data))]
    with master_for_a_disk_node(tmp_path / "tier") as (master, node):
        state = master.master.state
        with Store.connect(master.address, rpc_busy_poll_us=0) as store:
            with kvstore_process(node) as (proc, _):
                for i in range(0, len(keys), 8):  # paced: demotions keep up, the coldest end up on disk
                    assert store.batch_put_from(keys[i : i + 8], data[i : i + 8]) == [0] * 8
                    time.sleep(0.05)
                only = {n: [k for k in keys if holds(state.objects[k])] for n, (holds, _) in TIERS.items()}
                assert all(len(k) >= 5 for k in only.values()), {n: len(k) for n, k in only.items()}
                files = {"memory": next(node_memory_dir.glob("*.mem")), "disk": tmp_path / "tier"}
                damaged = {name: only[name][0] for name in TIERS}
                where = {name: TIERS[name][1](state.objects[k], files) for name, k in damaged.items()}
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            for path, at in where.values():  # one byte of one copy per tier, while the node is down
                with open(path, "r+b") as f:
                    f.seek(at)
                    byte = f.read(1)
                    f.seek(at)
                    f.write(bytes([byte[0] ^ 0xFF]))
            with kvstore_process(node):  # ready once every tier has named back what it holds
                for name, key in damaged.items():  # its tier found it damaged: never named back
                    assert key not in state.objects, f"{name}: a damaged copy was named back"
                for name, kept in only.items():
                    got = []
                    for i in range(0, len(kept), 16):
                        got += store.batch_get(kept[i : i + 16])
                    expected = [data[keys.index(k)].tobytes() for k in kept]
                    assert got[0] is None, f"{name}: a damaged copy was read"
                    pairs = zip(kept, got, expected, strict=True)
                    wrong = [k for k, g, e in pairs if g is not None and g != e]
                    lost = [k for k, g in zip(kept[1:], got[1:], strict=True) if g is None]
                    assert wrong == [] and lost == [], (name, wrong, lost)


@pytest.mark.parametrize("name", sorted(TIERS))
def test_the_suite_covers_the_tier(name: str) -> None:
    """Each tier the node builds has its row above (a new tier is added there on arrival)."""
    from kvstore.node.disk import DiskWorker
    from kvstore.node.memory_tier import MemoryTier

    assert {MemoryTier.name, DiskWorker.name} == set(TIERS) and name in TIERS
