"""The ucx transport between real processes and, as root, between two hosts (a network namespace): bytes
verified both ways, and a peer that dies fails what was in flight within the I/O timeout. Skipped where UCX
is not installed (the ucx extra, or KVSTORE_UCX_LIBRARY)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TargetProcess, start_target, stop_target, ucx_missing
from tests.helpers.target_process import pattern
from tests.integration.conftest import Namespace, SecondNic
from transfer_engine import Op, RequestState, TransferEngine

SIZE = 8 << 20


@pytest.fixture
def ucx_engine() -> Iterator[TransferEngine]:
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    with TransferEngine(transport="ucx", ucx_io_timeout=2.0) as engine:
        yield engine


@pytest.mark.parametrize("which", ["shared", "numpy"])
def test_both_directions_byte_exact_across_processes(ucx_engine: TransferEngine, which: str) -> None:
    target = start_target(size=SIZE, transport="ucx")
    try:
        region = target.shared_region if which == "shared" else target.numpy_region
        peer = ucx_engine.open_peer(target.name)
        assert peer.transport == "ucx"
        local = ucx_engine.allocate(SIZE)
        assert local.array is not None
        ucx_engine.read(local.addr, peer, region, 0, SIZE)
        assert np.array_equal(local.array, pattern(SIZE))
        local.array[:] = pattern(SIZE, 41)
        offset, length = 4099, 3 * (1 << 20) + 5
        ucx_engine.write(local.addr + offset, peer, region, offset, length)
        assert target.check(which, offset, length, 41 + 7 * offset)
    finally:
        stop_target(target)


def test_a_killed_peer_fails_what_was_in_flight_within_the_timeout(ucx_engine: TransferEngine) -> None:
    target = start_target(size=64 << 20, transport="ucx")
    try:
        peer = ucx_engine.open_peer(target.name)
        local = ucx_engine.allocate(64 << 20)
        offsets = np.arange(64, dtype=np.uint64) << 20
        start = time.monotonic()
        handles = [
            ucx_engine.submit(
                Op.READ, local.addr + offsets, peer, target.shared_region, offsets, 1 << 20, timeout=8
            )
            for _ in range(10)
        ]
        target.proc.kill()
        target.proc.wait()
        for handle in handles:
            assert handle.wait(timeout=15)
        states = np.concatenate([h.states() for h in handles])
        assert not (states == RequestState.PENDING).any()
        after = ucx_engine.submit(Op.READ, [local.addr], peer, target.shared_region, [0], 4096, timeout=8)
        assert after.wait(timeout=10)
        assert list(after.states()) == [RequestState.FAILED]
        assert time.monotonic() - start < 12
    finally:
        stop_target(target)


def test_a_store_forced_to_ucx_puts_and_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39, item 3: KVSTORE_TRANSPORT=ucx everywhere (master, node, client). Was: every put failed
    (-6) and a fenced read NotSupported, ucx being the only transport linked and unable to check the
    node's fences. Now a transport that checks them joins the link for fenced requests alone."""
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    from kvstore import Store
    from kvstore.procs import kvstore_process

    monkeypatch.setenv("KVSTORE_TRANSPORT", "ucx")
    master = ["master", "--port", "0", "--heartbeat-interval", "0.3", "--client-ttl", "3"]
    with kvstore_process(master) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node) as (_, node_ready), Store.connect(address) as client:
            rng = np.random.default_rng(3)
            values = {f"ucx/{i}": rng.bytes(int(rng.integers(1, 2 << 20))) for i in range(24)}
            for key, value in list(values.items())[:12]:
                client.put(key, value)
            rest = list(values)[12:]
            arrays = [np.frombuffer(values[k], np.uint8) for k in rest]
            assert client.batch_put_from(rest, arrays) == [0] * len(rest)
            for key, value in values.items():
                assert client.get(key) == value
            peer = client.engine.open_peer(node_ready.split()[0])
            assert peer.transports[0] == "ucx" and len(peer.transports) == 2


def run_script(script: str, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """Runs `script` in a fresh interpreter (UCX caches the routing table when a process first uses it, so
    a NIC made after that, the fixture's veth, would look unreachable to this one), with the tests
    importable and `env` added (an empty value removes that variable)."""
    # (not resolved: under tests/run this is the run folder, not the checkout)
    root = Path(__file__).parents[2]
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        **env,
    }
    full = {k: v for k, v in full.items() if v}
    return subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full,
    )


INITIATOR = """
import sys
import numpy as np
from tests.helpers.target_process import pattern
from transfer_engine import TransferEngine
host, nic, name, shared, numpy_region = sys.argv[1:6]
with TransferEngine(host=host, transport="ucx", nics=nic) as engine:
    peer = engine.open_peer(name)
    local = engine.allocate(16 << 20)
    engine.read(local.addr, peer, int(shared), 0, 16 << 20)
    assert np.array_equal(local.array, pattern(16 << 20))
    local.array[:] = pattern(16 << 20, seed=5)
    engine.write(local.addr, peer, int(numpy_region), 0, 16 << 20)
print("OK")
"""


@pytest.mark.root
def test_another_host_is_reached_over_ucx(netns: Namespace) -> None:
    """The initiator runs in a process of its own: UCX caches the routing table when a process first uses
    it, so a NIC made after that (the fixture's veth) would look unreachable to this one. The engine's NIC
    is named: UCX's tcp leaves only from the engine's NICs, and veth ones are used only when named."""
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    target = start_target(
        size=16 << 20, transport="ucx", host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name]
    )
    try:
        nic = netns.link
        args = [netns.local_addr, nic, target.name, str(target.shared_region), str(target.numpy_region)]
        out = run_script(INITIATOR, args)
        assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr
        assert target.check("numpy", 0, 16 << 20, 5)
    finally:
        stop_target(target)


def _ucx_preferring_target(netns: Namespace) -> TargetProcess:
    """A target in the namespace whose engine links ucx before tcp (KVSTORE_UCX_PREFER)."""
    prefix = ["ip", "netns", "exec", netns.name, "env", "KVSTORE_UCX_PREFER=1"]
    return start_target(size=16 << 20, host=netns.peer_addr, prefix=prefix)


UNREACHED = """
import sys
import numpy as np
from tests.helpers.target_process import pattern
from transfer_engine import TransferEngine
host, nic, name, shared = sys.argv[1:5]
with TransferEngine(host=host, nics=nic, ucx_prefer=True) as engine:
    peer = engine.open_peer(name)  # (ucx cannot reach it from lo: its place waits, tcp carries)
    assert peer.transports == ("ucx", "tcp"), peer.transports
    local = engine.allocate(16 << 20)
    for _ in range(3):
        engine.read(local.addr, peer, int(shared), 0, 16 << 20)
        assert np.array_equal(local.array, pattern(16 << 20))
    moved = {p.transport: p.bytes for p in engine.paths(peer)}
    assert moved.get("tcp", 0) >= 48 << 20 and not moved.get("ucx"), moved
print("OK")
"""


@pytest.mark.root
def test_a_peer_ucx_cannot_reach_is_opened_over_tcp(netns: Namespace) -> None:
    """UCX preferred, but its only device (lo, UCX_NET_DEVICES) cannot reach the peer: the peer opens all
    the same, tcp carrying every request, while the ucx link is opened again in the background (it had
    failed open_peer as a whole)."""
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    target = _ucx_preferring_target(netns)
    try:
        nic = netns.link
        out = run_script(
            UNREACHED, [netns.local_addr, nic, target.name, str(target.shared_region)], UCX_NET_DEVICES="lo"
        )
        assert out.returncode == 0 and out.stdout.strip().endswith("OK"), f"{out.stderr[-3000:]}{out.stdout}"
    finally:
        stop_target(target)


@pytest.mark.gpu
def test_gpu_memory_moves_over_ucx_across_processes(ucx_engine: TransferEngine) -> None:
    """GPU to GPU and host to GPU between two processes over UCX (its CUDA transports: cuda_ipc on one
    host, GPUDirect RDMA between hosts), where the loaded UCX has CUDA support."""
    from transfer_engine import cuda
    from transfer_engine.errors import NotSupportedError

    cuda.require()
    target = start_target(size=SIZE, transport="ucx")
    try:
        assert target.gpu_region, "the target registers a GPU region where a GPU is usable"
        peer = ucx_engine.open_peer(target.name)
        with cuda.DeviceMemory(SIZE) as memory:
            region = ucx_engine.register_ptr(memory.ptr, SIZE, kind="gpu:0")
            try:
                ucx_engine.read(region.addr, peer, target.gpu_region, 0, SIZE)
            except NotSupportedError as exc:
                pytest.skip(f"this UCX does not move GPU memory: {exc}")
            host = np.empty(SIZE, np.uint8)
            cuda.copy_to_host(0, [memory.ptr], [host.ctypes.data], [SIZE])
            assert np.array_equal(host, pattern(SIZE))
            local = ucx_engine.allocate(SIZE)
            assert local.array is not None
            local.array[:] = pattern(SIZE, 3)
            ucx_engine.write(local.addr, peer, target.gpu_region, 0, SIZE)
            assert target.check("gpu", 0, SIZE, 3)
            ucx_engine.unregister(region)
    finally:
        stop_target(target)


def _network(netns: Namespace) -> str:
    """Both sides' addresses and routes, for a failure message."""
    shown = []
    for where in ([], ["-n", netns.name]):
        for what in (["-o", "addr"], ["route"], ["route", "show", "cache"]):
            run = subprocess.run(["ip", *where, *what], capture_output=True, text=True)
            shown.append(f"$ ip {' '.join(where + what)}\n{run.stdout}")
    return "\n".join(shown)


FAILOVER = """
import sys, time
import numpy as np
from tests.helpers.target_process import pattern
from tests.integration.conftest import flap_link
from transfer_engine import Op, RequestState, TransferEngine
host, nics, name, shared, flapped = sys.argv[1:6]
size = 16 << 20
with TransferEngine(host=host, nics=nics, ucx_prefer=True, ucx_io_timeout=0.5, tcp_io_timeout=0.5) as engine:
    peer = engine.open_peer(name)
    assert peer.transports == ("ucx", "tcp"), peer.transports
    local = engine.allocate(size)
    offsets = np.arange(0, size, 256 << 10, dtype=np.uint64)
    expected = pattern(size)

    flapper = flap_link(flapped, after=1.0, down_for=1.5)
    start, batches, slowest = time.monotonic(), 0, 0.0
    while time.monotonic() - start < 4.0:
        local.array[:] = 0
        began = time.monotonic()
        piece = 256 << 10
        handle = engine.submit(Op.READ, local.addr + offsets, peer, int(shared), offsets, piece, timeout=9)
        handle.wait()
        slowest = max(slowest, time.monotonic() - began)
        assert (handle.states() == RequestState.COMPLETED).all(), handle.errors()
        assert np.array_equal(local.array, expected)
        batches += 1
    flapper.join()
    moved_by_tcp = sum(p.bytes for p in engine.paths(peer) if p.transport == "tcp")
print("OK", batches, round(slowest * 1000), moved_by_tcp)
"""


@pytest.mark.root
def test_slices_ucx_loses_go_over_tcp_and_every_request_completes(
    netns: Namespace, second_nic: SecondNic
) -> None:
    """Failover across transports: UCX (preferred, on the second NIC only: UCX_NET_DEVICES) carries the
    reads; tcp is linked too (paths on both NICs). The second NIC goes down for 1.5 s mid-transfer: UCX's
    operations time out, its slices go to the tcp link (which moves them over the first NIC), every request
    completes with the right bytes, and the dead ucx link is opened again in the background."""
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    target = _ucx_preferring_target(netns)
    try:
        first = netns.link
        args = [netns.local_addr, f"{first},{second_nic.outside}", target.name, str(target.shared_region)]
        args.append(second_nic.outside)
        out = run_script(FAILOVER, args, UCX_NET_DEVICES=second_nic.outside)
        if out.returncode != 0 or not out.stdout.startswith("OK"):
            pytest.fail(f"exit {out.returncode}: {out.stderr[-3000:]}{out.stdout}\n{_network(netns)}")
        _, batches, slowest_ms, moved_by_tcp = out.stdout.split()
        print(f"\n{batches} batches, the slowest {slowest_ms} ms; tcp carried {int(moved_by_tcp) >> 20} MiB")
        assert int(moved_by_tcp) > 0  # what ucx lost went over tcp
    finally:
        stop_target(target)


RAILS = """
import json, sys, time
import numpy as np
from tests.helpers.target_process import pattern
from tests.integration.conftest import flap_link
from transfer_engine import Op, RequestState, TransferEngine
host, nics, name, shared, flapped = sys.argv[1:6]
size, piece = 16 << 20, 256 << 10
with TransferEngine(host=host, nics=nics, transport="ucx", ucx_io_timeout=0.5) as engine:
    peer = engine.open_peer(name)
    local = engine.allocate(size)
    offsets = np.arange(0, size, piece, dtype=np.uint64)
    expected = pattern(size)

    def read_all():
        local.array[:] = 0
        handle = engine.submit(Op.READ, local.addr + offsets, peer, int(shared), offsets, piece, timeout=30)
        handle.wait()
        assert (handle.states() == RequestState.COMPLETED).all(), handle.errors()
        assert np.array_equal(local.array, expected)

    def paths():  # (the ucx paths: tcp is linked beside a forced ucx for fenced requests alone)
        return {p.local_nic: p for p in engine.paths(peer) if p.transport == "ucx"}

    read_all()
    report = {"transports": list(peer.transports), "striped": {n: p.bytes for n, p in paths().items()}}
    flapper = flap_link(flapped, after=0.5, down_for=1.5)
    start, batches = time.monotonic(), 0
    while time.monotonic() - start < 3.0:
        read_all()
        batches += 1
    flapper.join()
    report["batches"] = batches
    report["failures"] = {n: p.failures for n, p in paths().items()}
    report["failovers"] = {n: p.failovers for n, p in paths().items()}
    deadline, report["came_back"] = time.monotonic() + 15, False
    while time.monotonic() < deadline and not report["came_back"]:
        before = paths()[flapped].bytes
        read_all()
        report["came_back"] = paths()[flapped].up and paths()[flapped].bytes > before
        time.sleep(0.1)
print("OK", json.dumps(report))
"""


@pytest.mark.root
def test_ucx_stripes_over_a_rail_per_nic_and_fails_over_between_them(
    netns: Namespace, second_nic: SecondNic
) -> None:
    """Both sides have two NICs, so each runs a UCX worker per NIC (a rail) and a peer link has a path per
    pair of rails on one subnet: a batch's reads go over both. The second NIC goes down for 1.5 s mid-
    transfer: its path's operations time out, their slices go to the other UCX path (ucx is the only
    transport for these unfenced reads: tcp is linked for fenced requests alone), every request completes
    with the right bytes, and the path comes back after `up`."""
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    target = start_target(
        size=16 << 20, transport="ucx", host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name]
    )
    try:
        first = netns.link
        args = [netns.local_addr, f"{first},{second_nic.outside}", target.name, str(target.shared_region)]
        args.append(second_nic.outside)
        out = run_script(RAILS, args, UCX_NET_DEVICES="")  # (a rail per NIC: UCX is not told)
        # (UCX logs to stdout: the report is the last line)
        last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
        assert out.returncode == 0 and last.startswith("OK"), (
            f"exit {out.returncode}: {out.stderr[-3000:]}\n{_network(netns)}"
        )
        report = json.loads(last.removeprefix("OK"))
        print(f"\n{report}")
        assert report["transports"] == ["ucx", "tcp"]  # tcp for fenced requests alone: none here
        assert set(report["striped"]) == {first, second_nic.outside}
        assert all(moved >= 4 << 20 for moved in report["striped"].values()), f"{report}\n{_network(netns)}"
        assert report["failures"][second_nic.outside] >= 1, report
        assert report["failovers"][second_nic.outside] >= 1, report
        assert report["came_back"], report
    finally:
        stop_target(target)
