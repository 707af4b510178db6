"""A user's replica count is a ledger record (ReplicaTargetSet) told to the nodes with their holds: each
replica's hold is sent again carrying it (its target field, beside the put's count), a copy's carries it,
and a master that rebuilds its table from what the nodes name back has the count set, the put's as base."""

from __future__ import annotations

from kvstore.config import MasterConfig
from kvstore.master.ledger import changes as c
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import HeldReplica, MountSegment

MiB = 1 << 20
NODES = ("c0", "c1", "c2")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _cluster(clock: Clock, restoring: bool = False) -> tuple[MasterState, dict[str, int]]:
    state = MasterState(MasterConfig.load(), clock=clock)
    segments = {}
    for i, node in enumerate(NODES):
        state.members.register_client(node, f"h{i}")
        address = f"127.0.0.1:{7000 + i}"
        segments[node] = state.members.mount_segment(
            MountSegment(node, address, 1, 16 * MiB, f"h{i}", 1 << 20, restoring=restoring)
        )
    return state, segments


def _copies(state: MasterState) -> int:
    """Plans, then plays the nodes: every copy task reported done."""
    state.replicator.plan()
    done = 0
    for node in NODES:
        for task in state.replicator.tasks_for(node):
            state.replicator.complete(node, task.task, True)
            done += 1
    return done


def _held(state: MasterState) -> dict[str, list[HeldReplica]]:
    """Plays the nodes: takes each one's holds and acknowledges them (a hold sent and not acknowledged is
    sent again, beside one told again since)."""
    held = {node: [HeldReplica._make(h) for h in state.space.holds.take(node, 100)] for node in NODES}
    for node, holds in held.items():
        state.space.holds.acknowledge(node, max((h.seq for h in holds), default=0))
    return held


def test_a_set_count_is_a_record_told_with_every_hold_and_restored_from_them() -> None:
    clock = Clock()
    state, _ = _cluster(clock)
    seen: list[c.ReplicaTargetSet] = []
    state.ledger.watch(c.ReplicaTargetSet, seen.extend)
    state.puts.put_start("c0", "k", MiB, 5, 1, False)
    state.puts.put_end("c0", "k")
    first = _held(state)
    assert [(h.replicas, h.target) for holds in first.values() for h in holds if h.key == "k"] == [(1, 0)]
    state.access.change_replica("k", 2)
    assert seen == [c.ReplicaTargetSet("k", 2)] and state.objects["k"].target_replicas == 2
    assert _copies(state) == 1
    held = _held(state)
    told = [h for holds in held.values() for h in holds if h.key == "k"]
    # told again with the count, and the copy; the put's count rides beside it
    assert len(told) == 2 and all((h.replicas, h.target) == (1, 2) for h in told)

    new, segments = _cluster(clock, restoring=True)
    for node in NODES:
        assert new.members.restore_segment(node, segments[node], [h[2:] for h in held[node]], last=True) == []
    meta = new.objects["k"]
    assert len(meta.replicas) == 2 and (meta.base_replicas, meta.target_replicas) == (1, 2)
    new.members.drop_client(
        meta.replicas[0].segment.client_id
    )  # one copy lost: a read finds it below its count
    new.access.get_replicas("k")
    assert _copies(new) == 1 and len(new.objects["k"].replicas) == 2


def test_a_count_set_back_to_zero_tells_the_puts_count_again() -> None:
    clock = Clock()
    state, _ = _cluster(clock)
    state.puts.put_start("c0", "k", MiB, 5, 1, False)
    state.puts.put_end("c0", "k")
    _held(state)
    state.access.change_replica("k", 3)
    state.access.change_replica("k", 0)  # its heat decides again
    holder = state.objects["k"].replicas[0].segment.client_id  # (placement draws among those that fit)
    assert [(h.replicas, h.target) for h in _held(state)[holder]] == [(1, 0)]
