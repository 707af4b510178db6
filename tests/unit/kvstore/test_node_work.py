"""A storage node's one work channel (AwaitWork) as the master answers it, with a fake clock: every kind
of work in one reply, woken when work is queued, bounded both ways, and refused by a deposed leader."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError, MasterUnavailableError
from kvstore.master.handlers import Deferred, Handlers
from kvstore.master.state import MasterState
from kvstore.rpc import messages as m

MiB = 1 << 20


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def two_nodes(epoch: int = 0, nodes: int = 2, **config: object) -> Handlers:
    state = MasterState(MasterConfig.load(**config), clock=Clock())
    for i in range(nodes):
        state.register_client(f"c{i}", f"h{i}")
        state.mount_segment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 16 * MiB, f"h{i}")
    return Handlers(state, epoch=epoch)


def poll(handlers: Handlers, client: str = "c0", wait: float = 0.0, **reports: object) -> object:
    return handlers.await_work(m.AwaitWork(client_id=client, wait=wait, epoch=handlers.epoch, **reports))  # type: ignore[arg-type]


def test_one_poll_carries_holds_then_kills_and_is_woken_when_work_is_queued() -> None:
    handlers = two_nodes()
    state = handlers.state
    parked = poll(handlers, "c0", wait=2.0)
    assert isinstance(parked, Deferred)  # nothing yet: the poll waits
    woken: list[bool] = []
    parked.on_ready(lambda: woken.append(True))
    state.put_start("c0", "k", MiB, 7, 1, False)
    state.put_end("c0", "k")
    assert woken == [True]  # the commit woke it: the node is told it holds the replica
    work = parked.make_reply()
    assert isinstance(work, m.NodeWork) and [h[5] for h in work.holds] == ["k"]
    state.remove("k", force=True)
    work = poll(handlers, held_through=work.holds[0][0])
    assert isinstance(work, m.NodeWork) and not work.holds
    (order,) = work.fences
    assert len(order.kills) == 1
    poll(handlers, acked=order.kills)  # acknowledged: the space is free again
    assert state.space.fences.stats()["fence_kills_outstanding"] == 0 and state.used == 0


def test_copies_go_out_on_the_channel_and_their_results_come_back_on_it() -> None:
    handlers = two_nodes(hot_access_rate=10.0, cool_access_rate=1.0, heat_half_life=2.0)
    state = handlers.state
    state.put_start("c0", "hot", MiB, 7, 1, False)
    state.put_end("c0", "hot")
    parked = poll(handlers, "c1", wait=2.0)
    assert isinstance(parked, Deferred)
    woken: list[bool] = []
    parked.on_ready(lambda: woken.append(True))
    state.change_replica("hot", 2)
    state.replicator.plan()  # the copy goes to the other node, whose poll it wakes
    assert woken == [True]
    target = "c1"
    work = parked.make_reply()
    assert isinstance(work, m.NodeWork)
    (task,) = work.copies
    poll(handlers, target, copied=[(task.task, True)])
    assert len(state.objects["hot"].replicas) == 2 and state.replicator.copies_done == 1


def test_the_channel_is_bounded_both_ways() -> None:
    handlers = two_nodes(nodes=1)
    state = handlers.state
    for i in range(m.FENCE_BATCH + 10):
        state.put_start("c0", f"k{i}", 512, i, 1, False)
        state.put_end("c0", f"k{i}")
    state.remove_all(force=True)
    work = poll(handlers)
    assert isinstance(work, m.NodeWork)
    assert sum(len(o.kills) for o in work.fences) == m.FENCE_BATCH  # an acknowledgement fits one request
    too_many = {"client_id": "c0", "wait": 0, "acked": list(range(1, m.FENCE_BATCH + 2))}
    with pytest.raises(InvalidArgumentError):
        m.AwaitWork.parse(too_many)
    for bad in ({"wait": 61}, {"wait": True}, {"copied": [[1, "yes"]]}, {"disk_done": [[0, True]]}):
        with pytest.raises(InvalidArgumentError):
            m.AwaitWork.parse({"client_id": "c0", "wait": 0, **bad})


def test_a_deposed_leader_changes_nothing_for_a_node_that_follows_a_newer_one() -> None:
    handlers = two_nodes(epoch=5)
    handlers.state.put_start("c0", "k", MiB, 7, 1, False)
    handlers.state.put_revoke("c0", "k")
    kills = handlers.state.space.fences.take("c0", 10)
    with pytest.raises(MasterUnavailableError):
        handlers.await_work(m.AwaitWork(client_id="c0", wait=0, epoch=6, acked=[k.id for k in kills]))
    assert handlers.state.space.fences.outstanding("c0")  # the acknowledgement was not taken
    work = handlers.await_work(m.AwaitWork(client_id="c0", wait=0, epoch=5))
    assert isinstance(work, m.NodeWork) and work.epoch == 5
