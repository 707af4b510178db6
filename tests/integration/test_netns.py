"""Two hosts on one machine: the target runs in its own network namespace behind a veth pair.

Only the namespace's own addresses are contacted. Needs root (skipped otherwise, with the reason).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import start_target, stop_target
from tests.helpers.target_process import pattern
from tests.integration.conftest import Namespace, SecondNic
from transfer_engine import Op, RequestState, TransferEngine

pytestmark = pytest.mark.root


def test_other_host_is_reached_over_tcp(netns: Namespace) -> None:
    target = start_target(size=16 << 20, host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        with TransferEngine(host=netns.local_addr, tcp_io_timeout=2.0) as engine:
            segment = engine.open_peer(target.name)  # auto: another namespace is another host
            assert segment.transport == "tcp"
            local = engine.allocate(16 << 20)
            assert local.array is not None
            engine.read(local.addr, segment, target.shared_region, 0, 16 << 20)
            assert np.array_equal(local.array, pattern(16 << 20))
            local.array[:] = pattern(16 << 20, seed=11)
            engine.write(local.addr, segment, target.numpy_region, 0, 16 << 20)
            assert target.check("numpy", 0, 16 << 20, 11)

            # The peer host dies: in-flight and later requests fail, nothing hangs.
            offsets = np.arange(16, dtype=np.uint64) << 20
            handle = engine.submit(
                Op.READ, local.addr + offsets, segment, target.shared_region, offsets, 1 << 20
            )
            target.proc.kill()
            target.proc.wait()
            assert handle.wait(timeout=10)
            after = engine.submit(Op.READ, [local.addr], segment, target.shared_region, [0], 4096, timeout=5)
            assert after.wait(timeout=10)
            assert list(after.states()) == [RequestState.FAILED]
    finally:
        stop_target(target)


def test_shm_is_refused_across_hosts(netns: Namespace) -> None:
    target = start_target(host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        with TransferEngine(host=netns.local_addr) as engine:
            from transfer_engine import NotSupportedError

            with pytest.raises(NotSupportedError):
                engine.open_peer(target.name, "shm")
    finally:
        stop_target(target)


def test_a_peer_on_another_host_advertises_every_nic_address_it_has(
    netns: Namespace, second_nic: SecondNic
) -> None:
    """The namespace has a second veth NIC on another subnet: a peer opened there lists both NICs with
    their addresses (its host has no PCI NIC, so its virtual ones are its NICs)."""
    tag = netns.name.removeprefix("kvs")
    target = start_target(host=netns.peer_addr, prefix=["ip", "netns", "exec", netns.name])
    try:
        with TransferEngine(host=netns.local_addr) as engine:
            peer = engine.open_peer(target.name)
            found = {(nic.name, nic.address, nic.prefix_len) for nic in peer.nics}
            assert found == {
                (f"kvn{tag}", netns.peer_addr, 30),
                (second_nic.inside, second_nic.peer_addr, 30),
            }
    finally:
        stop_target(target)
