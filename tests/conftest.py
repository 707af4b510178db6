from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from transfer_engine import TransferEngine

ROOT = Path(__file__).resolve().parent.parent
TARGET_SCRIPT = ROOT / "tests" / "helpers" / "target_process.py"

# The suite runs as a secured cluster: every master, node and client it starts (in this process or a
# child) proves this secret. Tests of a cluster without one take it out of their environment.
os.environ.setdefault("KVSTORE_CLUSTER_SECRET", "tests-" + os.urandom(16).hex())
# Its masters and clients share an admin secret too (remove_all, forced removals of others' objects:
# kvstore.rpc.admin); tests of a caller without it set admin_secret="" in code.
os.environ.setdefault("KVSTORE_MASTER_ADMIN_SECRET", os.urandom(32).hex())
os.environ.setdefault("KVSTORE_ADMIN_SECRET", os.environ["KVSTORE_MASTER_ADMIN_SECRET"])
# ... whose (loopback and namespace) fabric is its own: UCX may start (tests of the refusal take it out).
os.environ.setdefault("KVSTORE_UCX_TRUST_FABRIC", "1")


def pytest_configure(config: pytest.Config) -> None:
    """Under tests/run (KVSTORE_TEST_INSTALLED=1) the suite must test the installed wheel: importing the
    source checkout by accident would hide packaging defects (a package left out of the wheel)."""
    if os.environ.get("KVSTORE_TEST_INSTALLED") != "1":
        return
    import kvstore
    import transfer_engine

    source = Path(os.environ.get("KVSTORE_SOURCE_DIR", ROOT)).resolve()
    for package in (kvstore, transfer_engine):
        where = Path(package.__file__ or "").resolve()
        if where.is_relative_to(source):
            pytest.exit(
                f"{package.__name__} was imported from the source checkout ({where}), not the wheel", 2
            )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests run only where a CUDA driver and a GPU are usable; elsewhere they skip saying why."""
    from transfer_engine import cuda
    from transfer_engine.errors import NotSupportedError

    try:
        cuda.require()
        return
    except NotSupportedError as exc:
        skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {exc}")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def node_memory_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Storage nodes a test starts keep their segments in a shared-memory directory of the test's own
    (KVSTORE_NODE_MEMORY_DIR), removed after it: a node killed by a test leaves its memory there for a
    restart, and nothing of it may outlive the test."""
    import shutil
    import tempfile

    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    where = Path(tempfile.mkdtemp(prefix="kvstore-test-", dir=base))
    monkeypatch.setenv("KVSTORE_NODE_MEMORY_DIR", str(where))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (created), for file systems that fill up or fail. Needs root;
    skips otherwise."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@dataclass
class TargetProcess:
    proc: subprocess.Popen[str]
    name: str
    shared_region: int
    numpy_region: int
    gpu_region: int  # 0 where no GPU is usable

    def check(self, which: str, offset: int, length: int, seed: int) -> bool:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"CHECK {which} {offset} {length} {seed}\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip() == "OK"


def start_target(
    size: int = 8 << 20,
    transport: str = "auto",
    host: str = "127.0.0.1",
    prefix: Sequence[str] = (),
    port: int = 0,
    stderr: Any = None,
) -> TargetProcess:
    """Starts tests/helpers/target_process.py; `prefix` wraps it (e.g. `ip netns exec NS`); `stderr`: where
    its stderr goes (a file; default: this process's)."""
    cmd = [sys.executable, str(TARGET_SCRIPT), "--size", str(size), "--transport", transport, "--host", host]
    cmd += ["--port", str(port)]
    proc = subprocess.Popen(
        [*prefix, *cmd],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()  # readiness probe: the target prints READY once serving
    if not line or line[0] != "READY":
        proc.kill()
        raise RuntimeError(f"target process failed to start (exit {proc.wait()})")
    return TargetProcess(proc, line[1], int(line[2]), int(line[3]), int(line[4]))


def freeze(pid: int) -> None:
    """SIGSTOPs a process and returns once every thread of it is really stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                states.append(task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0])
        if states and all(s in "Tt" for s in states):
            return
        time.sleep(0.001)
    raise RuntimeError(f"process {pid} did not stop")


def stop_target(target: TargetProcess) -> None:
    if target.proc.poll() is None:
        assert target.proc.stdin is not None
        target.proc.stdin.close()
        try:
            target.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            target.proc.kill()
            target.proc.wait()


@pytest.fixture
def target() -> Iterator[TargetProcess]:
    t = start_target()
    yield t
    stop_target(t)


@pytest.fixture
def engine() -> Iterator[TransferEngine]:
    with TransferEngine(tcp_io_timeout=2.0) as e:
        yield e


def ucx_missing() -> str:
    """Why the ucx transport cannot run here ("" when it can), asked of an engine that starts it (by
    default an engine without an RDMA NIC does not even load UCX)."""
    with TransferEngine(ucx_prefer=True) as probe:
        return probe.unavailable_transports.get("ucx", "")
