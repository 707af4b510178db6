"""Pinned host memory: page-locked segments (mlock here; CUDA host registration where a driver is)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from transfer_engine import TransferEngine


def locked_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmLck:"))


def test_a_pinned_region_is_locked_and_unlocked_with_its_memory() -> None:
    with TransferEngine() as engine:
        before = locked_kib()
        region = engine.allocate(16 << 20, pinned=True)
        assert region.kind == "host-pinned" and region.pinned_by in ("mlock", "cuda")
        if region.pinned_by == "mlock":
            assert locked_kib() - before >= 16 << 10
        plain = engine.allocate(1 << 20)
        assert plain.kind == "host" and plain.pinned_by == "none"
        assert region.array is not None
        region.array[:] = 3  # ordinary memory to the process
        engine.unregister(region)
        del region
    assert locked_kib() <= before + 1024  # unlocked with the mapping (pages the runtime locked aside)


def test_transfers_reach_pinned_memory() -> None:
    with TransferEngine() as target, TransferEngine() as initiator:
        remote = target.allocate(1 << 20, pinned=True)
        assert remote.array is not None
        remote.array[:] = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
        local = initiator.allocate(1 << 20, pinned=True)
        initiator.read(local.addr, initiator.open_peer(target.name), remote.id, 0, 1 << 20)
        assert local.array is not None and np.array_equal(local.array, remote.array)


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv")
def test_a_refused_lock_names_the_limit_and_what_to_do() -> None:
    """Without CAP_IPC_LOCK and with a 64 KiB RLIMIT_MEMLOCK, an 8 MiB pinned segment is refused clearly."""
    from transfer_engine import cuda

    if cuda.available():
        pytest.skip(
            "a CUDA driver page-locks host memory here (cuMemHostRegister): mlock's limit is not used"
        )
    code = (
        "from transfer_engine import TransferEngine, NoMemoryError\n"
        "try:\n"
        "    TransferEngine().allocate(8 << 20, pinned=True)\n"
        "except NoMemoryError as exc:\n"
        "    print(exc)\n"
    )
    drop = ["setpriv", "--inh-caps=-ipc_lock", "--ambient-caps=-ipc_lock", "--bounding-set=-ipc_lock"]
    run = subprocess.run(
        [*drop, "prlimit", "--memlock=65536", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr
    assert "RLIMIT_MEMLOCK is 65536 bytes" in run.stdout and "CAP_IPC_LOCK" in run.stdout


def test_without_a_gpu_every_cuda_path_says_why() -> None:
    from transfer_engine import NotSupportedError, cuda

    if cuda.available():
        pytest.skip("a CUDA driver and GPU are present: the gpu tests cover this machine")
    with pytest.raises(NotSupportedError, match=r"CUDA|GPU|libcuda"):
        cuda.require()
    assert cuda.device_count() == 0
    with TransferEngine() as engine:  # pinning falls back to mlock, and says so
        assert engine.allocate(1 << 20, pinned=True).pinned_by == "mlock"
