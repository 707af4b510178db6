"""What the nodes are told they hold follows the ledger's records in one place, the memory space
(SegmentSpace, which owns the holds): a copy that landed (ReplicaAdded) and a user's count
(ReplicaTargetSet) are watched there and nowhere else, and each queues one hold per replica."""

from __future__ import annotations

from kvstore.config import MasterConfig
from kvstore.master.ledger import changes as c
from kvstore.master.planners.placement import SegmentSpace
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import HeldReplica, MountSegment

MiB = 1 << 20


def _state() -> MasterState:
    state = MasterState(MasterConfig.load(), clock=lambda: 100.0)
    for i in range(2):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 16 * MiB, f"h{i}", 1 << 20)
        )
    return state


def test_only_the_memory_space_tells_holds_of_copies_and_counts() -> None:
    state = _state()
    for kind in (c.ReplicaAdded, c.ReplicaTargetSet):
        owners = {type(getattr(w, "__self__", None)) for w in state.ledger._watchers.get(kind, [])}
        assert owners == {SegmentSpace}, f"{kind.__name__} watched by {owners}"


def test_a_copy_that_landed_is_told_once_with_the_count() -> None:
    state = _state()
    state.puts.put_start("c0", "k", MiB, 5, 1, False)
    state.puts.put_end("c0", "k")
    holder = state.objects["k"].replicas[0].segment.client_id  # (placement draws among those that fit)
    other = "c1" if holder == "c0" else "c0"
    state.space.holds.acknowledge(holder, state.space.holds.take(holder, 100)[-1][0])
    sent_before = state.space.holds.sent
    state.access.change_replica("k", 2)
    state.replicator.plan()
    (task,) = state.replicator.tasks_for(other)
    state.replicator.complete(other, task.task, True)
    copies = [HeldReplica._make(h) for h in state.space.holds.take(other, 100)]
    assert [(h.key, h.replicas, h.target) for h in copies] == [("k", 1, 2)]
    retold = [HeldReplica._make(h) for h in state.space.holds.take(holder, 100)]
    assert [(h.key, h.replicas, h.target) for h in retold] == [("k", 1, 2)]
    assert state.space.holds.sent - sent_before == 2
