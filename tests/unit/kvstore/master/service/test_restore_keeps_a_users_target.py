"""A master that rebuilds its table from what the nodes name back (a restart, a failover) restores a
user's pinned count as the object's target, not as its base: the put's count stays the base, and a hot
object gains no copy above the pin. A record without a target (a node of the previous version) restores as
it did, its count the base. The pin is a ledger record, so a replay rebuilds it too."""

from __future__ import annotations

from kvstore.config import MasterConfig
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import HeldReplica, MountSegment
from tests.unit.kvstore.master.ledger.test_ledger_replay import Clock, Recorder, _replayed

MiB = 1 << 20
NODES = ("c0", "c1", "c2")


def _cluster(clock: Clock, restoring: bool = False) -> tuple[MasterState, dict[str, int], Recorder]:
    state = MasterState(MasterConfig.load(), clock=clock)
    recorder = Recorder(state.ledger)  # (every record from the first mount: a replay starts empty)
    segments = {}
    for i, node in enumerate(NODES):
        state.members.register_client(node, f"h{i}")
        address = f"127.0.0.1:{7000 + i}"
        segments[node] = state.members.mount_segment(
            MountSegment(node, address, 1, 16 * MiB, f"h{i}", 1 << 20, restoring=restoring)
        )
    return state, segments, recorder


def _pinned_on_two(clock: Clock) -> dict[str, list[HeldReplica]]:
    """The holds of a master where `k` was put with one copy and pinned at two by its user."""
    state, _, _ = _cluster(clock)
    state.puts.put_start("c0", "k", MiB, 5, 1, False)
    state.puts.put_end("c0", "k")
    state.access.change_replica("k", 2)
    state.replicator.plan()
    for node in NODES:
        for task in state.replicator.tasks_for(node):
            state.replicator.complete(node, task.task, True)
    return {node: [HeldReplica._make(h) for h in state.space.holds.take(node, 100)] for node in NODES}


def _hot_copies(state: MasterState, key: str, clock: Clock) -> int:
    """Reads `key` far above the hot rate, plans, and answers how many copies the planner asks for."""
    for _ in range(500):
        state.access.get_replicas(key)
    clock.now += 0.1
    state.replicator.plan()
    planned = sum(len(state.replicator.tasks_for(node)) for node in NODES)
    return len(state.objects[key].replicas) + planned


def test_a_pinned_count_is_restored_as_the_target_and_holds_when_hot() -> None:
    clock = Clock()
    held = _pinned_on_two(clock)
    assert sum(len(h) for h in held.values()) == 2
    new, segments, recorder = _cluster(clock, restoring=True)
    for node in NODES:
        records = [h[2:] for h in held[node]]  # (RestoreRecords, as the node names them back)
        assert new.members.restore_segment(node, segments[node], records, last=True) == []
    meta = new.objects["k"]
    assert (len(meta.replicas), meta.base_replicas, meta.target_replicas) == (2, 1, 2)
    replayed = _replayed(recorder.records, clock)
    assert replayed.objects["k"].target_replicas == 2 and replayed.objects["k"].base_replicas == 1
    assert _hot_copies(new, "k", clock) == 2  # pinned: no third copy, however hot


def test_records_without_a_target_restore_their_count_as_the_base() -> None:
    """A node of the previous version names [offset, slot, gen, key, size, checksum, pinned, replicas]:
    the count is the base, as before, and a hot object grows past it."""
    clock = Clock()
    held = _pinned_on_two(clock)
    new, segments, _ = _cluster(clock, restoring=True)
    for node in NODES:
        records = [(*h[2:-2], 2) for h in held[node]]  # (its count as that version told it: the pin)
        assert new.members.restore_segment(node, segments[node], records, last=True) == []
    meta = new.objects["k"]
    assert (len(meta.replicas), meta.base_replicas, meta.target_replicas) == (2, 2, 0)
    assert _hot_copies(new, "k", clock) == 3
