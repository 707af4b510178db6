"""A storage node's one work channel (AwaitWork) as the master answers it, with a fake clock: every kind
of work in one reply, woken when work is queued, bounded both ways, and refused by a deposed leader."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError, MasterUnavailableError, ObjectNotFoundError, ProtocolError
from kvstore.master.service.handlers import Deferred, Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.framing import value_of
from kvstore.rpc.messages import MountSegment
from tests.unit.kvstore.master.state_helpers import ended_items, started_items

MiB = 1 << 20


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def two_nodes(epoch: int = 0, nodes: int = 2, **config: object) -> Handlers:
    state = MasterState(MasterConfig.load(**config), clock=Clock())
    for i in range(nodes):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(
            MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 16 * MiB, f"h{i}", 1 << 20)
        )
    return Handlers(state, epoch=epoch)


def poll(handlers: Handlers, client: str = "c0", wait: float = 0.0, **reports: object) -> object:
    """An AwaitWork of `client`'s node, its reports made under its current registration."""
    reports.setdefault("registration", handlers.state.members.clients[client].registration)
    return as_sent(
        handlers.await_work(m.AwaitWork(client_id=client, wait=wait, epoch=handlers.epoch, **reports))  # type: ignore[arg-type]
    )


def as_sent(reply: object) -> object:
    """A NodeWork reply as its node decodes it (its holds go encoded already); any other as it is."""
    return m.AwaitWork.decode_reply(value_of(reply)) if isinstance(reply, m.NodeWork) else reply


def test_one_poll_carries_holds_then_kills_and_is_woken_when_work_is_queued() -> None:
    handlers = two_nodes(nodes=1)  # (the put's node is c0's: placement draws among those that fit)
    state = handlers.state
    parked = poll(handlers, "c0", wait=2.0)
    assert isinstance(parked, Deferred)  # nothing yet: the poll waits
    woken: list[bool] = []
    parked.on_ready(lambda: woken.append(True))
    state.puts.put_start("c0", "k", MiB, 7, 1, False)
    assert woken == [True]  # the start woke it: the node is told of the replica while it is written
    work = as_sent(parked.make_reply())
    assert isinstance(work, m.NodeWork) and [h[5] for h in work.holds] == ["k"]
    state.puts.put_end("c0", "k")
    state.removal.remove("k", force=True)
    work = poll(handlers, held_through=work.holds[0][0])
    assert isinstance(work, m.NodeWork) and not work.holds
    (order,) = work.fences
    assert len(order.kills) == 1
    poll(handlers, acked=order.kills)  # acknowledged: the space is free again
    assert state.space.fences.stats()["fence_kills_outstanding"] == 0 and state.space.used == 0


def test_copies_go_out_on_the_channel_and_their_results_come_back_on_it() -> None:
    handlers = two_nodes(hot_access_rate=10.0, cool_access_rate=1.0, heat_half_life=2.0)
    state = handlers.state
    state.puts.put_start("c0", "hot", MiB, 7, 1, False)
    state.puts.put_end("c0", "hot")
    holder = state.objects["hot"].replicas[0].segment.client_id  # (placement draws among those that fit)
    target = "c1" if holder == "c0" else "c0"
    parked = poll(handlers, target, wait=2.0)
    assert isinstance(parked, Deferred)
    woken: list[bool] = []
    parked.on_ready(lambda: woken.append(True))
    state.access.change_replica("hot", 2)
    state.replicator.plan()  # the copy goes to the other node, whose poll it wakes
    assert woken == [True]
    work = as_sent(parked.make_reply())
    assert isinstance(work, m.NodeWork)
    (task,) = work.copies
    poll(handlers, target, copied=[(task.task, True)])
    assert len(state.objects["hot"].replicas) == 2 and state.replicator.copies_done == 1


def test_the_channel_is_bounded_both_ways() -> None:
    handlers = two_nodes(nodes=1)
    state = handlers.state
    for i in range(m.FENCE_BATCH + 10):
        state.puts.put_start("c0", f"k{i}", 512, i, 1, False)
        state.puts.put_end("c0", f"k{i}")
    state.removal.remove_all(force=True)
    work = poll(handlers)
    assert isinstance(work, m.NodeWork)
    assert sum(len(o.kills) for o in work.fences) == m.FENCE_BATCH  # an acknowledgement fits one request
    too_many = {"client_id": "c0", "wait": 0, "acked": list(range(1, m.FENCE_BATCH + 2))}
    with pytest.raises(InvalidArgumentError):
        m.AwaitWork.parse(too_many)
    bad_fields = (
        {"wait": 61},
        {"wait": True},
        {"copied": [[1, "yes"]]},
        {"disk_done": [[0, True]]},
        {"acked": [1, 0]},
        {"acked": [True]},
        {"acked": [2**64]},
        {"acked": "1"},
    )
    for bad in bad_fields:
        with pytest.raises(InvalidArgumentError):
            m.AwaitWork.parse({"client_id": "c0", "wait": 0, **bad})


def test_a_deposed_leader_changes_nothing_for_a_node_that_follows_a_newer_one() -> None:
    handlers = two_nodes(epoch=5, nodes=1)  # (the put's node is c0's)
    handlers.state.puts.put_start("c0", "k", MiB, 7, 1, False)
    handlers.state.puts.put_revoke("c0", "k")
    kills = handlers.state.space.fences.take("c0", 10)
    with pytest.raises(MasterUnavailableError):
        handlers.await_work(m.AwaitWork(client_id="c0", wait=0, epoch=6, acked=[k.id for k in kills]))
    assert handlers.state.space.fences.outstanding("c0")  # the acknowledgement was not taken
    work = handlers.await_work(m.AwaitWork(client_id="c0", wait=0, epoch=5))
    assert isinstance(work, m.NodeWork) and work.epoch == 5


def test_a_put_is_acknowledged_once_its_nodes_hold_it() -> None:
    """put_end answers when every node of the put's replicas acknowledged the holds (what the next
    master rebuilds from), not before; at once when they had already; and at the latest after
    durable_wait (a node that never answers cannot stall puts)."""
    handlers = two_nodes()
    start = m.PutStart(client_id="c0", items=[m.PutItem("a", MiB, 1), m.PutItem("b", MiB, 2)], replicas=2)
    placed = started_items(handlers.put_start(start))
    assert isinstance(placed, list) and all(r.code == 0 for r in placed)
    reply = handlers.put_end(m.PutEnd(client_id="c0", keys=["a", "b"]))
    assert isinstance(reply, Deferred)  # neither node acknowledged yet
    ready: list[bool] = []
    reply.on_ready(lambda: ready.append(True))
    held = {}
    for node in ("c0", "c1"):
        work = poll(handlers, node)
        assert isinstance(work, m.NodeWork) and sorted(h[5] for h in work.holds) == ["a", "b"]
        held[node] = max(h[0] for h in work.holds)
    poll(handlers, "c0", held_through=held["c0"])
    assert ready == []  # one node of two
    poll(handlers, "c1", held_through=held["c1"])
    assert ready == [True]
    assert [r.code for r in ended_items(reply.make_reply())] == [0, 0]
    assert handlers.state.access.exists_many(["a", "b"]) == [True, True]

    handlers.put_start(m.PutStart(client_id="c0", items=[m.PutItem("c", MiB, 3)], replicas=1))
    (node,) = [r.segment.client_id for r in handlers.state.objects["c"].replicas]
    work = poll(handlers, node)
    assert isinstance(work, m.NodeWork)
    poll(handlers, node, held_through=work.holds[-1][0])  # acknowledged while the bytes were written
    assert ended_items(handlers.put_end(m.PutEnd(client_id="c0", keys=["c"])))[0].code == 0

    handlers.put_start(m.PutStart(client_id="c0", items=[m.PutItem("d", MiB, 4)], replicas=1))
    late = handlers.put_end(m.PutEnd(client_id="c0", keys=["d"]))
    assert isinstance(late, Deferred) and late.timeout == handlers.state.config.durable_wait
    assert ended_items(late.make_reply())[0].code == 0  # what the server sends when the wait runs out


def test_holds_of_a_revoked_put_are_cancelled_and_release_its_waiters() -> None:
    handlers = two_nodes(nodes=1, durable_wait=0)
    handlers.put_start(m.PutStart(client_id="c0", items=[m.PutItem("k", MiB, 1)], replicas=1))
    assert ended_items(handlers.put_end(m.PutEnd(client_id="c0", keys=["k"])))[0].code == 0  # 0: no wait
    handlers = two_nodes(nodes=1)
    state = handlers.state
    state.puts.put_start("c0", "gone", MiB, 1, 1, False)
    seq = state.objects["gone"].hold_seq
    ready: list[bool] = []
    assert state.space.holds.when_held({"c0": seq}, lambda: ready.append(True), 2.0)
    state.puts.put_revoke("c0", "gone")  # freed before the node heard of it: never told, nothing to wait for
    assert ready == [True]
    work = poll(handlers)
    assert isinstance(work, m.NodeWork) and not work.holds


def test_a_removal_is_acknowledged_once_its_nodes_forgot_the_object() -> None:
    """A removal answers once the nodes applied its kills (and dropped the object from what they name
    back), so a master that dies right after it cannot get the object back from them."""
    handlers = two_nodes(nodes=1)
    state = handlers.state
    state.puts.put_start("c0", "k", MiB, 7, 1, False)
    state.puts.put_end("c0", "k")
    work = poll(handlers)
    assert isinstance(work, m.NodeWork)
    poll(handlers, held_through=work.holds[-1][0])
    reply = handlers.remove(m.Remove(keys=["k", "absent"]))
    assert isinstance(reply, Deferred)
    ready: list[bool] = []
    reply.on_ready(lambda: ready.append(True))
    work = poll(handlers)
    assert isinstance(work, m.NodeWork) and ready == []  # handed out, not applied yet
    poll(handlers, acked=[k for order in work.fences for k in order.kills])
    assert ready == [True]
    assert [r.code for r in reply.make_reply()] == [0, ObjectNotFoundError.code]
    assert isinstance(handlers.remove(m.Remove(keys=["absent"])), list)  # nothing to wait for


def test_a_node_that_never_acknowledges_cannot_grow_the_waiters() -> None:
    """Replies waiting on a node that never answers go after durable_wait; what waited for them is
    dropped, so a stuck or hostile node costs the master bounded memory however many puts it gets."""
    handlers = two_nodes(nodes=1)
    state = handlers.state
    for i in range(500):
        handlers.put_start(m.PutStart(client_id="c0", items=[m.PutItem(f"k{i}", 512, i)], replicas=1))
        assert isinstance(handlers.put_end(m.PutEnd(client_id="c0", keys=[f"k{i}"])), Deferred)
        state.clock.now += 0.1  # type: ignore[attr-defined]
    assert state.space.holds.stats()["puts_awaiting_holds"] <= 64


@pytest.mark.parametrize(
    "hold",
    [
        [1, 1, 0, 0, 1, "k", 8, 9, False],  # a field short
        [1, 1, 0, 0, 1, 7, 8, 9, False, 1],  # a key that is not text
        ["1", 1, 0, 0, 1, "k", 8, 9, False, 1],  # a number that is not one
        (1, 1, 0, 0, 1, "k", 8, 9, False, 1),  # msgpack makes lists: anything else was not decoded
    ],
)
def test_a_node_refuses_a_malformed_hold(hold: list[object]) -> None:
    good = [2, 1, 0, 0, 1, "k", 8, 9, False, 1]
    assert m.AwaitWork.decode_reply([0, [], [good], [], [], [], []]).holds == [m.HeldReplica(*good)]
    with pytest.raises(ProtocolError, match="malformed HeldReplica"):
        m.AwaitWork.decode_reply([0, [], [good, hold], [], [], [], []])


@pytest.mark.parametrize("check", [[1, 1, 0, 8], [1, 1, 0, 8, "9"], [1, 1, 0, 8, None]])
def test_a_node_refuses_a_malformed_checksum_check(check: list[object]) -> None:
    good = [1, 1, 0, 8, 9]
    assert m.AwaitWork.decode_reply([0, [], [], [], [], [], [good]]).checks == [m.ChecksumCheck(*good)]
    with pytest.raises(ProtocolError, match="malformed ChecksumCheck"):
        m.AwaitWork.decode_reply([0, [], [], [], [], [], [good, check]])


def test_reports_made_under_another_registration_acknowledge_nothing() -> None:
    """A node whose session registered again (the master restarted) may send reports numbered by the
    master before: acknowledging holds or kills by those numbers would count ones it never received."""
    handlers = two_nodes(nodes=1)  # (the put's node is c0's)
    state = handlers.state
    state.puts.put_start("c0", "k", MiB, 7, 1, False)
    work = poll(handlers)
    assert isinstance(work, m.NodeWork) and work.holds
    seq = work.holds[-1][0]  # (the hold's number)
    stale = state.members.clients["c0"].registration ^ 2
    for registration in (0, stale):
        poll(handlers, held_through=seq, registration=registration)
        assert state.space.holds.stats()["holds_outstanding"] == 1  # still sent until acknowledged
    poll(handlers, held_through=seq)
    assert state.space.holds.stats()["holds_outstanding"] == 0


def test_a_registration_keeps_its_number_while_the_master_knows_the_client() -> None:
    handlers = two_nodes()
    state = handlers.state
    number = state.members.clients["c0"].registration
    state.members.register_client("c0", "h0")  # again, known: the same registration
    assert state.members.clients["c0"].registration == number != 0
    assert state.members.clients["c1"].registration != number
