"""The master's disk-tier bookkeeping with a fake clock: demotion planning, eviction to disk, loads,
disk eviction, task expiry, and a node that goes away."""

from __future__ import annotations

import pytest

from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import data_offset, record_bytes
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state, put, started_items


@pytest.fixture
def clock() -> Clock:
    return Clock()


def with_disk(clock: Clock, memory: int = 8 * MiB, disk: int = 32 * MiB, **config: object) -> MasterState:
    state = make_state(clock, [("h0", memory)], lease_ttl=1.0, **config)
    state.disk.disk_space.mount("c0", "h0", disk, "/nvme/tier")
    return state


def overflow(state: MasterState, count: int = 12) -> None:
    """Puts `count` objects (1 MiB; memory holds 8), the node carrying out every disk order after each:
    the oldest end up on disk only."""
    for i in range(count):
        put(state, f"k{i}")
        run_orders(state)


def run_orders(state: MasterState, ok: bool = True) -> list[m.DiskOrder]:
    """Plays the disk node: takes its orders and reports them done."""
    orders = state.disk.take("c0")
    state.disk.complete("c0", [m.DiskResult(o.order, ok) for o in orders])
    return orders


def test_above_the_watermark_the_coldest_objects_are_demoted(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5)
    for i in range(4):
        put(state, f"k{i}")
    assert state.disk.take("c0") == []  # 50%: not above the watermark
    put(state, "k4")
    orders = run_orders(state)
    assert [o.kind for o in orders] == ["demote"] * len(orders) and orders[0].key == "k0"
    assert all(o.disk_offset % 4096 == 0 for o in orders)
    assert state.objects["k0"].disk is not None and state.disk.demotions == len(orders)
    assert state.stats()["disk_used"] == len(orders) * record_bytes(MiB)


def test_eviction_keeps_demoted_objects_on_disk_and_a_read_loads_them(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5)
    overflow(state)  # memory holds 8: the last puts evict the coldest, which have disk records
    assert state.counters.evictions_to_disk == state.counters.evictions > 0
    cold = state.objects["k0"]
    assert cold.replicas == [] and cold.disk is not None and state.core.exists("k0")
    assert state.access.get_replicas("k0") == cold  # a hit; the reader's reply waits for the load
    done: list[bool] = []
    assert state.disk.load(cold, lambda: done.append(True))
    (order,) = [o for o in state.disk.take("c0") if o.kind == "load"]
    assert order.memory.engine == "127.0.0.1:7000" and order.disk_offset == cold.disk.offset
    state.disk.complete("c0", [m.DiskResult(order.order, True)])
    assert done == [True] and len(cold.replicas) == 1 and state.disk.loads == 1


def test_a_failed_or_late_load_frees_its_memory_and_is_a_miss(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5)
    overflow(state)
    cold = state.objects["k0"]
    used = state.space.used
    waited: list[int] = []
    assert state.disk.load(cold, lambda: waited.append(1))
    assert state.disk.load(cold, lambda: waited.append(2))  # a second reader joins the same load
    run_orders(state, ok=False)
    assert waited == [1, 2] and cold.replicas == [] and state.disk.load_failures == 1
    assert state.disk.load(cold, lambda: None)
    clock.now += state.config.disk_task_timeout + 1
    state.expire()
    assert state.disk.load_failures == 2 and cold.replicas == [] and state.space.used <= used + MiB


def test_a_full_disk_evicts_by_its_policy_and_a_lost_node_takes_its_records(clock: Clock) -> None:
    state = with_disk(clock, memory=8 * MiB, disk=4 * record_bytes(MiB), demote_watermark=0.25)
    for i in range(16):
        put(state, f"k{i}")
        run_orders(state)
    assert state.disk.disk_evictions > 0
    assert sum(1 for meta in state.objects.values() if meta.disk is not None) <= 4
    on_disk_only = [k for k, meta in state.objects.items() if not meta.replicas]
    state.members.drop_client("c0")  # the node (memory and disk) is gone
    assert not any(state.core.exists(k) for k in on_disk_only) and state.objects == {}


def test_one_read_leaves_a_transient_copy_a_second_read_within_the_window_promotes(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5, promote_window=10.0)
    overflow(state)
    cold = state.objects["k0"]
    assert cold.replicas == []
    assert state.disk.load(cold, lambda: None)
    run_orders(state)
    assert "k0" in state.disk.transient and state.disk.promotions == 0  # one read: first to go
    clock.now += 2  # its reader's lease is over
    assert state.removal.evict_one()  # the transient copy goes before any colder object in the policy
    assert cold.replicas == [] and cold.disk is not None and "k0" not in state.disk.transient
    assert state.disk.load(cold, lambda: None)
    run_orders(state)
    clock.now += 5
    state.access.get_replicas("k0")  # read again within the window: promoted
    assert state.disk.promotions == 1 and "k0" not in state.disk.transient
    assert "k0" in set(state.policy.candidates())


def test_a_put_waits_for_the_demotion_of_the_object_it_would_evict(clock: Clock) -> None:
    """Memory full of objects still being demoted: the put's reply waits for a demotion to end (then the
    victim leaves memory but stays on disk), instead of dropping an object a moment before it is safe."""
    from kvstore.master.service.handlers import Deferred, Handlers

    state = with_disk(clock, demote_watermark=0.5)
    for i in range(8):  # memory full; demotions ordered, none done
        put(state, f"k{i}")
    assert state.disk.demoting("k0") and state.objects["k0"].disk is None
    handlers = Handlers(state)
    request = m.PutStart("c0", [m.PutItem("new", MiB, 1), m.PutItem("newer", MiB, 2)], 1, False, 0)
    reply = handlers.put_start(request)
    assert isinstance(reply, Deferred) and reply.timeout == state.config.put_room_wait
    ready: list[bool] = []
    reply.on_ready(lambda: ready.append(True))
    run_orders(state)  # the node finishes its demotions
    assert ready == [True]
    results = started_items(reply.make_reply())
    assert [code for code, _msg, _placed in results] == [0, 0]
    assert state.counters.evictions_to_disk == state.counters.evictions == 2
    assert state.core.exists("k0") and state.objects["k0"].disk is not None  # on disk, not lost


def test_a_put_whose_wait_runs_out_drops_the_victim_rather_than_fail(clock: Clock) -> None:
    from kvstore.master.service.handlers import Deferred, Handlers

    state = with_disk(clock, demote_watermark=0.5)
    for i in range(8):
        put(state, f"k{i}")
    reply = Handlers(state).put_start(m.PutStart("c0", [m.PutItem("new", MiB, 1)], 1, False, 0))
    assert isinstance(reply, Deferred)
    clock.now += state.config.put_room_wait  # the server asks for the reply when its wait is up
    (result,) = started_items(reply.make_reply())
    assert result.code == 0 and not state.core.exists("k0") and state.counters.evictions == 1


def test_a_put_that_outruns_planning_demotes_its_victim_instead_of_dropping_it(clock: Clock) -> None:
    """Planning gives records to as many bytes as the demote watermark leaves free; puts that need more
    room than that, with no demotion in flight, start their victim's demotion and wait for it (the
    operator run lost objects here with 160 MiB of disk free)."""
    from kvstore.master.service.handlers import Deferred, Handlers

    # A budget of 0.8 MiB: one demotion per plan at most. The batch is larger than half of memory (the
    # default bound on one client's puts in progress).
    state = with_disk(clock, demote_watermark=0.9, client_put_bytes=64 * MiB)
    overflow(state, 8)  # memory full; the planned demotions are done
    undemoted = [f"k{i}" for i in range(8) if state.objects[f"k{i}"].disk is None]
    assert undemoted and not state.disk.some_demotion()
    reply = Handlers(state).put_start(
        m.PutStart("c0", [m.PutItem(f"n{i}", MiB, i) for i in range(len(undemoted) + 1)], 1, False, 0)
    )
    assert isinstance(reply, Deferred)
    orders = state.disk.take("c0")  # the victim's demotion and the next victims', in one go
    assert len(orders) == len(undemoted)
    state.disk.complete("c0", [m.DiskResult(o.order, True) for o in orders])
    while isinstance(reply, Deferred):  # each wait: the node writes the records, the put goes on
        reply = reply.make_reply()
        run_orders(state)
    assert all(code == 0 for code, _msg, _placed in started_items(reply))
    assert state.counters.evictions_to_disk == state.counters.evictions  # nothing lost
    assert all(state.core.exists(f"k{i}") for i in range(8))


def test_background_eviction_stops_at_an_object_still_being_demoted(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5, high_watermark=0.9, low_watermark=0.5)
    for i in range(8):  # memory full, demotions ordered, none done
        put(state, f"k{i}")
    assert state.removal.evict_to_watermark() == 0 and all(state.core.exists(f"k{i}") for i in range(8))
    run_orders(state)
    assert (
        state.removal.evict_to_watermark() > 0
        and state.counters.evictions_to_disk == state.counters.evictions
    )
    assert all(state.core.exists(f"k{i}") for i in range(8))  # none lost: evicted to disk


def test_a_load_without_room_waits_for_a_demotion_instead_of_missing(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5)
    overflow(state)  # k0..k3 end up on disk only
    for i in range(12, 16):  # memory refilled with objects whose demotions are ordered, none done
        put(state, f"k{i}")
    in_memory = [k for k, meta in state.objects.items() if meta.replicas]
    for key in in_memory:  # no disk-backed object left in memory: none can make room for a load
        meta = state.objects[key]
        if meta.disk is not None:
            state.disk.drop_record(meta)
    cold = state.objects["k0"]
    assert cold.replicas == [] and cold.disk is not None
    done: list[bool] = []
    assert state.disk.load(cold, lambda: done.append(True))  # accepted: it waits for room
    assert done == [] and not [t for t in state.disk.tasks.values() if t.kind == "load"]
    run_orders(state)  # demotions end: the load finds room (evicting a now disk-backed object)
    (load,) = [o for o in state.disk.take("c0") if o.kind == "load"]
    state.disk.complete("c0", [m.DiskResult(load.order, True)])
    assert done == [True] and len(cold.replicas) == 1

    late = state.objects["k1"]
    for key in [k for k, meta in state.objects.items() if meta.replicas]:
        if state.objects[key].disk is not None:
            state.disk.drop_record(state.objects[key])
    missed: list[bool] = []
    assert not state.disk.load(late, lambda: missed.append(True))  # no demotion in flight: a miss now


def test_a_cancelled_demotion_keeps_its_disk_space_until_its_node_reports(clock: Clock) -> None:
    """The node may still be writing a demotion the master gave up on: that record's space is not given
    to another record before the node says it is done with it."""
    state = with_disk(clock, demote_watermark=0.5, disk=4 * MiB)
    for i in range(5):
        put(state, f"k{i}")
    orders = state.disk.take("c0")
    assert orders
    used = state.disk.disk_space.used
    for task in state.disk.tasks.values():
        task.deadline = clock.now  # past due (the client itself stays alive)
    clock.now += 0.1
    state.expire()  # the master gives up on them: failed, but the node may still write
    assert state.disk.demote_failures == len(orders) and state.disk.disk_space.used == used
    state.disk.complete("c0", [m.DiskResult(o.order, True) for o in orders])  # late reports
    assert state.disk.disk_space.used == 0 and all(state.objects[f"k{i}"].disk is None for i in range(5))


def test_a_reader_on_the_disks_host_reads_disk_only_objects_from_the_file(clock: Clock) -> None:
    """Same host: the location names the file and record (no load); the next read within the promote
    window loads and promotes it. Another host, or no host given: its node loads it for the reader."""
    from kvstore.master.service.handlers import Deferred, Handlers

    state = with_disk(clock, demote_watermark=0.5)
    overflow(state)
    cold = state.objects["k0"]
    assert cold.replicas == [] and cold.disk is not None
    handlers = Handlers(state)
    (found,) = handlers.get_replicas(m.GetReplicas(["k0"], host_id="h0"))
    (where,) = found.locations
    assert where == m.Location(m.DISK, "h0", "", 0, data_offset(cold.disk.offset), 0, 0, "/nvme/tier")
    assert state.disk.direct_reads == 1 and not state.disk.tasks
    reply = handlers.get_replicas(m.GetReplicas(["k0"], host_id="h0"))  # again, within the window
    assert isinstance(reply, Deferred)
    (load,) = [o for o in state.disk.take("c0") if o.kind == "load"]
    state.disk.complete("c0", [m.DiskResult(load.order, True)])
    (found,) = reply.make_reply()
    assert [x.tier for x in found.locations] == [m.MEMORY] and state.disk.promotions == 1

    for host in ("h1", ""):
        other = state.objects["k1"]
        assert other.replicas == [] and other.disk is not None
        reply = handlers.get_replicas(m.GetReplicas(["k1"], host_id=host))
        assert isinstance(reply, Deferred)  # its node loads it
        run_orders(state)
        (found,) = reply.make_reply()
        assert [x.tier for x in found.locations] == [m.MEMORY]
        state.removal.evict_one()  # back to disk only for the next reader
        while state.objects["k1"].replicas:
            state.removal.evict_one()
        clock.now += state.config.promote_window + 1  # not a promotion


def test_reads_served_from_a_lease_count_toward_promotion(clock: Clock) -> None:
    state = with_disk(clock, demote_watermark=0.5)
    overflow(state)
    cold = state.objects["k0"]
    assert state.disk.read_from_file(cold, "h0") == "here"
    state.access.touch(["k0"])  # a client read it again from its leased disk location
    (load,) = [o for o in state.disk.take("c0") if o.kind == "load"]
    state.disk.complete("c0", [m.DiskResult(load.order, True)])
    assert len(cold.replicas) == 1 and state.disk.promotions == 1


def test_disk_locations_and_paths_are_validated_on_the_wire() -> None:
    from kvstore.errors import InvalidArgumentError, ProtocolError

    good = [[4096, 7, [[m.DISK, "h0", "", 0, 8192, 0, 0, "/nvme/tier"]]]]
    (found,) = m.GetReplicas.decode_reply(good)
    assert found.locations == [m.Location(m.DISK, "h0", "", 0, 8192, 0, 0, "/nvme/tier")]
    served = [m.DISK, "h0", "h0:1234", 3, 8192 + 100, 0, 0, ""]  # through the node's engine: any offset
    assert m.GetReplicas.decode_reply([[4096, 7, [served]]])[0].locations[0].engine == "h0:1234"
    bad_ones = (
        [m.DISK, "h0", "", 0, 8192, 0, 0, "relative"],
        [m.DISK, "h0", "", 0, 100, 0, 0, "/nvme/tier"],  # not on a page
        [m.DISK, "h0", "", 0, 8192, 0, 0, ""],  # neither an engine nor a path
        [m.DISK, "h0", "h0:1", 0, -4096, 0, 0, ""],
        [7, "h0", "h0:1", 0, 0, 0, 0, ""],  # no such tier
        [m.MEMORY, 5, "h0:1", 0, 0, 0, 0, ""],
        [m.MEMORY, "h0", "h0:1", 0, 0, 2**64, 0, ""],
        [1, 2],
    )
    for bad in bad_ones:
        with pytest.raises(ProtocolError):
            m.GetReplicas.decode_reply([[4096, 7, [bad]]])
    with pytest.raises(ProtocolError):
        m.GetReplicas.decode_reply([[4096, 7, [], None]])  # an older master's four fields
    assert m.GetReplicas.parse({"keys": ["a"]}).host_id == ""
    with pytest.raises(InvalidArgumentError):
        m.GetReplicas.parse({"keys": ["a"], "host_id": 5})
    for path in ("tier", "", "/a\0b", 7):
        with pytest.raises(InvalidArgumentError):
            m.MountDisk.parse({"client_id": "c", "size": 1 << 20, "host_id": "h", "path": path})
