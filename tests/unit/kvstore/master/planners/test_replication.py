"""Hot-key replication in the master's bookkeeping, with a fake clock."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError, NotFoundError
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import MountSegment

MiB = 1 << 20


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def cluster(clock: Clock, segments: int = 3, **config: object) -> MasterState:
    defaults = {"hot_access_rate": 10.0, "cool_access_rate": 1.0, "heat_half_life": 2.0, "lease_ttl": 0.5}
    state = MasterState(MasterConfig.load(**{**defaults, **config}), clock=clock)
    for i in range(segments):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 16 * MiB, f"h{i}", 1 << 20)
        )
    state.puts.put_start("c0", "hot", MiB, 7, 1, False)
    state.puts.put_end("c0", "hot")
    return state


def heat_up(state: MasterState, clock: Clock, reads: int = 60, seconds: float = 1.0) -> None:
    for _ in range(reads):
        clock.now += seconds / reads
        state.access.get_replicas("hot")


def run_copies(state: MasterState, ok: bool = True) -> int:
    """Plays the clients: takes each client's tasks and reports them done."""
    done = 0
    for client in list(state.members.clients):
        for task in state.replicator.tasks_for(client):
            state.replicator.complete(client, task.task, ok)
            done += 1
    return done


def test_hot_key_grows_replicas_on_other_hosts_then_cools() -> None:
    clock = Clock()
    state = cluster(clock)
    heat_up(state, clock)
    assert state.replicator.rate(state.objects["hot"]) > 10
    state.replicator.plan()
    assert run_copies(state) == 1
    state.replicator.plan()
    assert run_copies(state) == 1
    state.replicator.plan()
    assert run_copies(state) == 0  # max_hot_replicas = 3
    meta = state.objects["hot"]
    assert len(meta.replicas) == 3 and len({r.segment.host_id for r in meta.replicas}) == 3
    used = state.space.used
    clock.now += 60  # no reads: the key cools down
    for _ in range(3):
        state.replicator.plan()
    assert len(meta.replicas) == 1 and state.space.used == used - 2 * MiB
    assert state.replicator.dropped == 2


def test_tasks_are_handed_out_once_and_failures_free_space() -> None:
    clock = Clock()
    state = cluster(clock)
    heat_up(state, clock)
    state.replicator.plan()
    before = state.space.used
    tasks = [t for c in state.members.clients for t in state.replicator.tasks_for(c)]
    assert len(tasks) == 1 and tasks[0].size == MiB and tasks[0].checksum == 7
    assert [t for c in state.members.clients for t in state.replicator.tasks_for(c)] == []
    owner = next(c for c in state.members.clients if state.space.segments[tasks[0].segment].client_id == c)
    state.replicator.complete("someone-else", tasks[0].task, True)  # not theirs: ignored
    state.replicator.complete(owner, tasks[0].task, False)
    assert state.space.used == before - MiB and len(state.objects["hot"].replicas) == 1


def test_change_replica_exact_count() -> None:
    clock = Clock()
    state = cluster(clock)
    state.access.change_replica("hot", 3)
    for _ in range(3):
        state.replicator.plan()
        run_copies(state)
    assert len(state.objects["hot"].replicas) == 3
    state.access.change_replica("hot", 1)
    clock.now += 1  # past any lease
    for _ in range(3):
        state.replicator.plan()
    assert len(state.objects["hot"].replicas) == 1
    with pytest.raises(NotFoundError):
        state.access.change_replica("nope", 2)
    with pytest.raises(InvalidArgumentError):
        state.access.change_replica("hot", 99)


def test_removed_object_and_lost_segment_cancel_copies() -> None:
    clock = Clock()
    state = cluster(clock)
    state.access.change_replica("hot", 3)
    state.replicator.plan()
    assert len(state.replicator.tasks) == 1
    state.removal.remove("hot", force=True)
    assert not state.replicator.tasks
    for client in state.members.clients:  # the nodes fence the copy's destination off: its space comes back
        state.space.acknowledge(client, [k.id for k in state.space.fences.take(client, 1 << 20)])
    assert state.space.used == 0
    # A copy whose destination client dies: cancelled with the segment.
    state.puts.put_start("c0", "k2", MiB, 1, 1, False)
    state.puts.put_end("c0", "k2")
    state.access.change_replica("k2", 2)
    state.replicator.plan()
    (task,) = state.replicator.tasks.values()
    state.members.drop_client(task.segment.client_id)
    assert not state.replicator.tasks


def test_copies_never_evict() -> None:
    clock = Clock()
    state = cluster(clock, segments=2)
    # Fill both segments completely (hot already takes 1 MiB).
    for i in range(31):
        state.puts.put_start("c1", f"fill{i}", MiB, i, 1, False)
        state.puts.put_end("c1", f"fill{i}")
    state.access.change_replica("hot", 2)
    state.replicator.plan()
    assert not state.replicator.tasks and state.counters.evictions == 0
