"""Many NICs at once over TCP (root; skipped otherwise): a second "host" in a network namespace with two
veth NICs on two subnets. This side's engine names its two NICs (KVSTORE_NICS: virtual NICs are used only
when named), so each peer link has a path per NIC: a batch's slices stripe over both, a NIC that goes down
mid-transfer loses nothing (its slices move to the other path) and comes back after `up`, and requests for
memory on a NUMA node leave on the NIC near it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import start_target, stop_target
from tests.helpers.target_process import pattern
from tests.integration.conftest import Namespace, SecondNic, flap_link, limit_rate
from tests.unit.transfer_engine.sysfs_trees import FakeSysfs
from transfer_engine import Op, PathInfo, RequestState, TransferEngine

MIB = 1 << 20


def read_all(engine: TransferEngine, peer_name: str, region: int, total: int, piece: int = MIB) -> float:
    """Reads `total` bytes of the target's region in `piece` requests, one batch; checks them; seconds."""
    peer = engine.open_peer(peer_name)
    local = engine.allocate(total)
    assert local.array is not None
    offsets = np.arange(0, total, piece, dtype=np.uint64)
    start = time.perf_counter()
    handle = engine.submit(Op.READ, offsets + local.addr, peer, region, offsets, piece, timeout=60)
    handle.wait()
    seconds = time.perf_counter() - start
    assert (handle.states() == RequestState.COMPLETED).all(), handle.errors()
    assert np.array_equal(local.array, pattern(total))
    engine.unregister(local)
    return seconds


def by_nic(paths: list[PathInfo]) -> dict[str, PathInfo]:
    return {p.local_nic: p for p in paths if p.transport == "tcp"}


def test_a_batch_stripes_over_both_nics(netns: Namespace, second_nic: SecondNic) -> None:
    target = start_target(size=32 * MIB, host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        nics = f"{netns.link},{second_nic.outside}"
        with TransferEngine(host=netns.local_addr, nics=nics) as engine:
            read_all(engine, target.name, target.shared_region, 32 * MIB)
            paths = by_nic(engine.paths(engine.open_peer(target.name)))
            assert set(paths) == {netns.link, second_nic.outside}
            assert {p.remote_address.rsplit(":", 1)[0] for p in paths.values()} == {
                netns.peer_addr,
                second_nic.peer_addr,
            }
            for p in paths.values():
                assert p.up and p.failures == 0
                assert p.bytes >= 8 * MIB, paths  # each carried a fair share of the 32 MiB
            assert sum(p.bytes for p in paths.values()) == 32 * MIB
    finally:
        stop_target(target)


def test_two_nics_under_a_rate_limit_move_at_least_1_7_times_one(
    netns: Namespace, second_nic: SecondNic
) -> None:
    """Each NIC capped at 300 Mbit/s both ways (tc tbf): the cap, not this machine's CPU, sets the pace."""
    for device, namespace in [
        (netns.link, ""),
        (second_nic.outside, ""),
        ("kvn" + netns.name.removeprefix("kvs"), netns.name),
        (second_nic.inside, netns.name),
    ]:
        limit_rate(device, "300mbit", namespace)
    total = 24 * MIB
    target = start_target(size=total, host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        with TransferEngine(host=netns.local_addr, nics=netns.link) as one:
            assert len(by_nic(one.paths(one.open_peer(target.name)))) == 1
            one_nic = min(read_all(one, target.name, target.shared_region, total) for _ in range(2))
        nics = f"{netns.link},{second_nic.outside}"
        with TransferEngine(host=netns.local_addr, nics=nics) as two:
            two_nics = min(read_all(two, target.name, target.shared_region, total) for _ in range(2))
        speedup = one_nic / two_nics
        rates = f"1 NIC {total / one_nic / 1e6:.1f} MB/s, 2 NICs {total / two_nics / 1e6:.1f} MB/s"
        print(f"\n{rates}: {speedup:.2f}x")
        assert speedup >= 1.7
    finally:
        stop_target(target)


def test_a_nic_that_goes_down_mid_transfer_loses_no_request_and_comes_back(
    netns: Namespace, second_nic: SecondNic
) -> None:
    """Batches of reads run for 4 s; at 1 s the second NIC goes down, at 2.5 s up again. Every request
    completes with the right bytes; the path is marked down, its slices move over, and it carries traffic
    again after `up`."""
    size = 16 * MIB
    target = start_target(size=size, host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        nics = f"{netns.link},{second_nic.outside}"
        with TransferEngine(host=netns.local_addr, nics=nics, tcp_io_timeout=0.5) as engine:
            peer = engine.open_peer(target.name)
            local = engine.allocate(size)
            assert local.array is not None
            offsets = np.arange(0, size, 256 << 10, dtype=np.uint64)
            expected = pattern(size)

            flapper = flap_link(second_nic.outside, after=1.0, down_for=1.5)
            start = time.monotonic()
            batches, slowest = 0, 0.0
            try:
                while time.monotonic() - start < 4.0:
                    local.array[:] = 0
                    began = time.monotonic()
                    handle = engine.submit(
                        Op.READ,
                        offsets + local.addr,
                        peer,
                        target.shared_region,
                        offsets,
                        256 << 10,
                        timeout=30,
                    )
                    handle.wait()
                    slowest = max(slowest, time.monotonic() - began)
                    assert (handle.states() == RequestState.COMPLETED).all(), handle.errors()
                    assert np.array_equal(local.array, expected)
                    batches += 1
            finally:
                flapper.join()
            moved = by_nic(engine.paths(peer))[second_nic.outside]
            assert moved.failures >= 1, moved
            print(f"\n{batches} batches of {size >> 20} MiB, the slowest {slowest * 1000:.0f} ms; {moved}")
            # Back after `up`: probed, re-admitted, carrying slices again.
            deadline = time.monotonic() + 15
            before = moved.bytes
            while time.monotonic() < deadline:
                read = engine.submit(
                    Op.READ, offsets + local.addr, peer, target.shared_region, offsets, 256 << 10, timeout=30
                )
                read.wait()
                assert (read.states() == RequestState.COMPLETED).all()
                now = by_nic(engine.paths(peer))[second_nic.outside]
                if now.up and now.bytes > before:
                    break
                time.sleep(0.1)
            else:
                pytest.fail(f"the second NIC's path did not come back: {by_nic(engine.paths(peer))}")
    finally:
        stop_target(target)


def test_requests_for_memory_on_numa_node_1_leave_on_the_nic_near_it(
    netns: Namespace, second_nic: SecondNic, tmp_path: Path
) -> None:
    """A fake topology puts the first NIC on NUMA node 0 and the second on node 1 (two PCI functions):
    with both idle, a read into memory registered on node 1 goes over the second NIC only, and node 0's
    over the first."""
    fake = FakeSysfs(tmp_path / "sys")
    fake.numa_node(0, "0")
    fake.numa_node(1, "1")
    for node, name in [(0, netns.link), (1, second_nic.outside)]:
        device = fake.pci_device([f"000{node}:00:01.0", f"000{node}:01:00.0"], numa=node)
        fake.net(name, device, speed="10000")
    target = start_target(size=8 * MIB, host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        with TransferEngine(host=netns.local_addr, sysfs_root=str(fake.root)) as engine:
            peer = engine.open_peer(target.name)
            assert set(by_nic(engine.paths(peer))) == {netns.link, second_nic.outside}
            for node, nic in [(1, second_nic.outside), (0, netns.link)]:
                buffer = np.zeros(8 * MIB, dtype=np.uint8)
                local = engine.register(buffer, numa_node=node)
                assert local.numa_node == node
                before = {name: p.bytes for name, p in by_nic(engine.paths(peer)).items()}
                engine.read(local.addr, peer, target.shared_region, 0, 8 * MIB)
                assert np.array_equal(buffer, pattern(8 * MIB))
                after = {name: p.bytes for name, p in by_nic(engine.paths(peer)).items()}
                assert {name: after[name] - before[name] for name in after} == {
                    nic: 8 * MIB,
                    **{other: 0 for other in after if other != nic},
                }
                engine.unregister(local)
    finally:
        stop_target(target)


def test_writes_through_a_nic_flap_all_land_and_nothing_stale_lands_after(
    netns: Namespace, second_nic: SecondNic
) -> None:
    """Batches of writes (a new pattern each) run while the second NIC goes down for 0.8 s (shorter than
    the target's own timeout, so its end of the connection lives on): every request completes. Right
    after the NIC is back one last pattern is written, and checked at the target for 3 s: what the dead
    path's connection still held to send (the kernel retransmits it once the NIC is back) never lands
    over it."""
    size = 16 * MIB
    target = start_target(size=size, host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        nics = f"{netns.link},{second_nic.outside}"
        with TransferEngine(host=netns.local_addr, nics=nics, tcp_io_timeout=0.5) as engine:
            peer = engine.open_peer(target.name)
            local = engine.allocate(size)
            assert local.array is not None
            offsets = np.arange(0, size, 256 << 10, dtype=np.uint64)

            def write(seed: int) -> None:
                assert local.array is not None
                local.array[:] = pattern(size, seed)
                handle = engine.submit(
                    Op.WRITE, offsets + local.addr, peer, target.shared_region, offsets, 256 << 10, timeout=30
                )
                handle.wait()
                assert (handle.states() == RequestState.COMPLETED).all(), handle.errors()

            flapper = flap_link(second_nic.outside, after=1.0, down_for=0.8)
            seed = 0
            try:
                while flapper.is_alive():
                    seed = seed % 200 + 1
                    write(seed)
            finally:
                flapper.join()
            assert by_nic(engine.paths(peer))[second_nic.outside].failures >= 1
            write(250)
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                assert target.check("shared", 0, size, 250), "a write of an ended request landed later"
                time.sleep(0.05)
    finally:
        stop_target(target)
