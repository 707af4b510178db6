"""A node that mounts its segment again after a master failover fences off every allocation handed out
before but the objects it still holds (memory_tier's one engine pass, TransferEngine.kill_allocations_but),
with real processes: after a master failover (the node and its fence table up throughout) and after the node
itself is SIGKILLed and started again on its shared-memory segment (a fresh fence table)."""

from __future__ import annotations

import signal
import time

import numpy as np

from kvstore import Store
from kvstore.procs import kvstore_process
from kvstore.rpc import messages as m
from tests.integration.kvstore.conftest import wait_for_mounts
from transfer_engine import Op, Region, RequestState, StaleLocationError

FAST = ["--client-ttl", "10", "--heartbeat-interval", "0.3"]
LATE_SIZE = 64 << 10


def _values(count: int) -> list[bytes]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, int(n) << 10, dtype=np.uint8).tobytes() for n in rng.integers(1, 48, count)]


def _stall_a_put(store: Store) -> tuple[str, int, int, tuple[int, int], Region]:
    """A put whose writer stalls half way (its first half admitted: the allocation is announced on the
    node, and its checksum will never match): (engine, region id, offset, its fence, the writer's bytes)."""
    start = m.PutStart(client_id=store.client_id, items=[m.PutItem("late", LATE_SIZE, 1)], replicas=1)
    (placed,) = store.master.call(start)
    engine, region, offset, slot, gen = placed.value[0]
    late = store.engine.allocate(LATE_SIZE, export=False)
    assert late.array is not None
    late.array[:] = 0xEE
    assert _write_half(store, engine, region, offset, (slot, gen), late, 0) == (RequestState.COMPLETED, 0)
    return engine, region, offset, (slot, gen), late


def _write_half(
    store: Store, engine: str, region: int, offset: int, fence: tuple[int, int], late: Region, half: int
) -> tuple[RequestState, int]:
    peer = store.session.peer(engine)
    assert peer is not None
    n = LATE_SIZE // 2
    return store.engine.transfer_one(
        Op.WRITE, late.addr + half * n, peer, region, offset + half * n, n, fence=fence
    )


def _reads_through(store: Store, cached: list[m.Location], data: list[bytes], region: int) -> None:
    """Each cached location (in `region` of its node now) admits a read of exactly its object's bytes."""
    into = store.engine.allocate(LATE_SIZE, export=False)
    assert into.array is not None
    for where, value in zip(cached, data, strict=False):
        peer = store.session.peer(where.engine)
        assert peer is not None
        n, held = len(value), (where.slot, where.gen)
        read = store.engine.transfer_one(Op.READ, into.addr, peer, region, where.offset, n, fence=held)
        assert read == (RequestState.COMPLETED, 0)
        assert into.array[:n].tobytes() == value
    store.engine.unregister(into)


def test_a_remount_after_a_failover_keeps_exactly_the_held_objects_alive() -> None:
    """300 objects committed and a put left half-written by a stalled writer; the master is SIGKILLed and
    started again. The node names back the 300 (the half-written one fails its checksum) and fences the
    rest: every object reads back byte-exact, also straight through the location a reader cached before
    the failover (a held allocation stays alive in its own generation), and the stalled writer's second
    half is refused as stale (with the remount's kills left out it was admitted, into space the new
    master hands out afresh)."""
    data = _values(300)
    keys = [f"held/{i}" for i in range(len(data))]
    with kvstore_process(["master", "--port", "0", *FAST]) as (master, ready):
        address = ready.split()[0]
        port = address.rsplit(":", 1)[1]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node), Store.connect(address, rpc_timeout=3.0) as store:
            assert store.batch_put_from(keys, data) == [0] * len(keys)
            cached = [r.locations[0] for r in store.master.call(m.GetReplicas(keys=keys[:20]))]
            engine, region, offset, fence, late = _stall_a_put(store)
            master.send_signal(signal.SIGKILL)
            master.wait()
            with kvstore_process(["master", "--port", port, *FAST]):
                wait_for_mounts(store, 1)
                assert store.stats()["master"]["restored_replicas"] == len(keys)
                assert not store.exists("late")
                assert [store.get(k) for k in keys] == data
                second = _write_half(store, engine, region, offset, fence, late, 1)
                assert second == (RequestState.FAILED, StaleLocationError.code)
                _reads_through(store, cached, data, cached[0].region_id)


def test_a_node_started_again_keeps_exactly_the_held_objects_alive() -> None:
    """The same with the node SIGKILLed and started again within the client TTL (its segment's bytes kept
    in shared memory, its fence table new): the 300 objects are named back at the same allocations and
    read back byte-exact, also through the locations cached before; the stalled writer's second half,
    aimed at the new process, is refused as stale at once (with the remount's kills left out it waited
    the 3 s an allocation not announced yet is waited for)."""
    data = _values(300)
    keys = [f"held/{i}" for i in range(len(data))]
    with kvstore_process(["master", "--port", "0", *FAST]) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with Store.connect(address, rpc_timeout=3.0) as store:
            with kvstore_process(node) as (proc, _):
                assert store.batch_put_from(keys, data) == [0] * len(keys)
                cached = [r.locations[0] for r in store.master.call(m.GetReplicas(keys=keys[:20]))]
                _, _, offset, fence, late = _stall_a_put(store)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            with kvstore_process(node) as (_, ready):
                assert f"kept={len(keys)}" in ready.split()
                assert [store.get(k) for k in keys] == data
                now = [r.locations[0] for r in store.master.call(m.GetReplicas(keys=keys[:20]))]
                assert [(w.offset, w.slot, w.gen) for w in now] == [(w.offset, w.slot, w.gen) for w in cached]
                engine, region = now[0].engine, now[0].region_id
                began = time.monotonic()
                second = _write_half(store, engine, region, offset, fence, late, 1)
                took = time.monotonic() - began
                assert second == (RequestState.FAILED, StaleLocationError.code)
                assert took < 2.0, took  # killed, not waited for as an allocation to come (3 s)
                _reads_through(store, now, data, region)
