"""A node that mounts its segment again after a master failover fences off every allocation handed out
before but the objects it still holds (memory_tier's one engine pass, TransferEngine.kill_allocations_but),
with real processes: the master SIGKILLed and started again on its address, the node (and its fence table)
up throughout."""

from __future__ import annotations

import signal

import numpy as np

from kvstore import Store
from kvstore.procs import kvstore_process
from kvstore.rpc import messages as m
from tests.integration.kvstore.conftest import wait_for_mounts
from transfer_engine import Op, RequestState, StaleLocationError

FAST = ["--client-ttl", "10", "--heartbeat-interval", "0.3"]
LATE_SIZE = 64 << 10


def _values(count: int) -> list[bytes]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, int(n) << 10, dtype=np.uint8).tobytes() for n in rng.integers(1, 48, count)]


def test_a_remount_after_a_failover_keeps_exactly_the_held_objects_alive() -> None:
    """300 objects committed and a put left half-written by a stalled writer (its allocation announced
    on the node: its first half was admitted); the master is SIGKILLed and started again. The node names
    back the 300 (the half-written one fails its checksum) and fences the rest: every object reads back
    byte-exact, also straight through the location a reader cached before the failover (a held allocation
    stays alive in its own generation), and the stalled writer's second half is refused as stale (with
    the remount's kills left out it was admitted, into space the new master hands out afresh)."""
    data = _values(300)
    keys = [f"held/{i}" for i in range(len(data))]
    with kvstore_process(["master", "--port", "0", *FAST]) as (master, ready):
        address = ready.split()[0]
        port = address.rsplit(":", 1)[1]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node), Store.connect(address, rpc_timeout=3.0) as store:
            assert store.batch_put_from(keys, data) == [0] * len(keys)
            cached = [r.locations[0] for r in store.master.call(m.GetReplicas(keys=keys[:20]))]
            start = m.PutStart(client_id=store.client_id, items=[m.PutItem("late", LATE_SIZE, 1)], replicas=1)
            (placed,) = store.master.call(start)
            engine, region, offset, slot, gen = placed.value[0]
            late = store.engine.allocate(LATE_SIZE, export=False)
            assert late.array is not None
            late.array[:] = 0xEE
            half = LATE_SIZE // 2
            peer = store.session.peer(engine)
            assert peer is not None
            fence = (slot, gen)
            written = store.engine.transfer_one(Op.WRITE, late.addr, peer, region, offset, half, fence=fence)
            assert written == (RequestState.COMPLETED, 0)  # announced and alive before the failover

            master.send_signal(signal.SIGKILL)
            master.wait()
            with kvstore_process(["master", "--port", port, *FAST]):
                wait_for_mounts(store, 1)
                stats = store.stats()["master"]
                assert stats["restored_replicas"] == len(keys)
                assert not store.exists("late")
                got = [store.get(k) for k in keys]
                assert got == data
                second = store.engine.transfer_one(
                    Op.WRITE, late.addr + half, peer, region, offset + half, half, fence=fence
                )
                assert second == (RequestState.FAILED, StaleLocationError.code)
                into = store.engine.allocate(LATE_SIZE, export=False)
                assert into.array is not None
                for where, value in zip(cached, data, strict=False):
                    n, held = len(value), (where.slot, where.gen)
                    read = store.engine.transfer_one(
                        Op.READ, into.addr, peer, where.region_id, where.offset, n, fence=held
                    )
                    assert read == (RequestState.COMPLETED, 0)
                    assert into.array[:n].tobytes() == value
