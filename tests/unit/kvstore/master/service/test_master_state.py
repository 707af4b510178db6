"""Master bookkeeping with a fake clock: placement, two-phase puts, leases, eviction, expiry."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import (
    InvalidArgumentError,
    NoSpaceError,
    NotEnoughSegmentsError,
    NotFoundError,
    ObjectBusyError,
    ObjectExistsError,
    TooManyPutsError,
)
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.messages import HeldReplica, MountSegment
from tests.unit.kvstore.master.state_helpers import (
    Clock,
    MiB,
    clock,
    fence,
    holds_of,
    make_state,
    put,
    started_items,
)

__all__ = ["clock"]  # (the fixture)


def test_two_phase_put_is_invisible_until_end(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)])
    state.puts.put_start("c0", "k", MiB, 1, 1, False)
    assert not state.core.exists("k") and state.access.get_replicas("k") is None
    with pytest.raises(ObjectBusyError):
        state.puts.put_start("c0", "k", MiB, 1, 1, False)
    state.puts.put_end("c0", "k")
    assert state.core.exists("k")
    with pytest.raises(NotFoundError):
        state.puts.put_end("c0", "k")


def test_revoke_frees_space_once_the_node_fenced_it(clock: Clock) -> None:
    state = make_state(clock, [("h0", 4 * MiB)])
    state.puts.put_start("c0", "k", 4 * MiB, 1, 1, False)
    state.puts.put_revoke("c0", "k")
    # The writer may still be writing (its bytes in flight): the space waits for the node's fence.
    assert state.space.used == 4 * MiB and not state.core.exists("k")
    with pytest.raises(NoSpaceError):
        put(state, "k2", 4 * MiB)
    assert len(fence(state)) == 1
    assert state.space.used == 0
    put(state, "k2", 4 * MiB)


def test_every_allocation_has_a_fresh_generation_and_a_live_slot(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)])
    a = put(state, "a")
    b = put(state, "b")
    assert a[0].gen < b[0].gen and a[0].slot != b[0].slot
    state.removal.remove("a")
    (kill,) = state.space.fences.take("c0", 1 << 20)
    assert (kill.slot, kill.gen) == (a[0].slot, a[0].gen)
    assert put(state, "c")[0].slot not in (a[0].slot, b[0].slot)  # not reused before the node confirms
    state.space.acknowledge("c0", [kill.id])
    d = put(state, "d")
    assert d[0].slot == a[0].slot and d[0].gen > kill.gen


def test_a_leased_key_is_fencing_until_the_node_confirms(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)], lease_ttl=5.0)
    put(state, "k")
    state.access.get_replicas("k")  # a reader may now cache this location for half the lease
    state.removal.remove("k", force=True)
    assert state.space.fences.fencing("k")
    with pytest.raises(ObjectBusyError, match="fenced"):
        state.puts.put_start("c0", "k", MiB, 7, 1, False)
    fence(state)
    assert not state.space.fences.fencing("k")
    put(state, "k")
    # Unacknowledged, fencing ends with the lease: then no reader uses a cached location any more.
    state.access.get_replicas("k")
    state.removal.remove("k", force=True)
    clock.now += 5.1
    state.expire()
    assert not state.space.fences.fencing("k")


def test_existing_key_same_bytes_ok_different_bytes_refused(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)])
    state.puts.put_start("c0", "k", MiB, 42, 1, False)
    state.puts.put_end("c0", "k")
    assert state.puts.put_start("c0", "k", MiB, 42, 1, False) is None  # identical value: nothing to write
    with pytest.raises(ObjectExistsError):
        state.puts.put_start("c0", "k", MiB, 43, 1, False)
    with pytest.raises(ObjectExistsError):
        state.puts.put_start("c0", "k", 2 * MiB, 42, 1, False)


def test_replicas_prefer_distinct_hosts(clock: Clock) -> None:
    state = make_state(clock, [("h0", 64 * MiB), ("h0", 64 * MiB), ("h1", 16 * MiB)])
    placed = put(state, "k", replicas=2)
    assert {r.segment.host_id for r in placed} == {"h0", "h1"}
    placed3 = put(state, "k3", replicas=3)
    assert len({r.segment.id for r in placed3}) == 3
    with pytest.raises(NotEnoughSegmentsError, match="3 usable of 3 mounted"):
        put(state, "k4", replicas=4)  # only three segments: named as such, not "no space"


def test_eviction_makes_room_in_lru_order(clock: Clock) -> None:
    state = make_state(clock, [("h0", 4 * MiB)], eviction_policy="lru")
    for k in "abcd":
        put(state, k)
        clock.now += 1
    clock.now += 10  # leases from any get expire
    state.access.get_replicas("a")  # a becomes most recently used
    clock.now += 10
    put(state, "e")
    assert not state.core.exists("b") and state.core.exists("a") and state.core.exists("e")
    assert state.counters.evictions == 1


def test_never_evicts_leased_or_pinned(clock: Clock) -> None:
    state = make_state(clock, [("h0", 3 * MiB)], lease_ttl=5.0)
    put(state, "pinned", pin=True)
    put(state, "leased")
    put(state, "old")
    state.access.get_replicas("leased")  # lease for 5 s
    put(state, "new")  # evicts "old", the only evictable one
    assert state.core.exists("pinned") and state.core.exists("leased") and not state.core.exists("old")
    put(state, "newer")  # evicts "new": still never the pinned or the leased one
    assert state.core.exists("pinned") and state.core.exists("leased") and not state.core.exists("new")


def test_no_space_only_when_nothing_is_evictable(clock: Clock) -> None:
    state = make_state(clock, [("h0", 2 * MiB)], lease_ttl=5.0, client_put_bytes=64 * MiB)
    put(state, "pinned", pin=True)
    state.puts.put_start("c0", "unfinished", MiB, 1, 1, False)
    with pytest.raises(NoSpaceError):
        put(state, "y")  # one pinned, one being written: nothing may go
    state.puts.put_end("c0", "unfinished")
    state.access.get_replicas("unfinished")
    put(state, "y")  # a read lease does not hold a writer off (the reader's copy is fenced)
    assert not state.core.exists("unfinished") and state.core.exists("y")


def test_remove_respects_lease_unless_forced(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)], lease_ttl=5.0)
    put(state, "k")
    state.access.get_replicas("k")
    with pytest.raises(ObjectBusyError):
        state.removal.remove("k")
    state.removal.remove("k", force=True)
    with pytest.raises(NotFoundError):
        state.removal.remove("k")


def test_watermarks(clock: Clock) -> None:
    state = make_state(
        clock, [("h0", 10 * MiB)], high_watermark=0.8, low_watermark=0.5, eviction_policy="lru"
    )
    for i in range(8):
        put(state, f"k{i}")
    assert state.removal.evict_to_watermark() == 0  # at 0.8, not above
    put(state, "k8")
    assert state.removal.evict_to_watermark() == 4  # 0.9 -> 0.5
    assert state.core.usage() == pytest.approx(0.5)
    assert [state.core.exists(f"k{i}") for i in range(9)] == [False] * 4 + [True] * 5


def test_silent_client_is_dropped_with_its_replicas(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)], client_ttl=10.0, heartbeat_interval=1.0)
    placed = put(state, "both", replicas=2)
    assert len(placed) == 2
    only_c1 = state.puts.put_start("c0", "one", MiB, 1, 1, False)
    assert only_c1 is not None
    state.puts.put_end("c0", "one")
    clock.now += 5
    state.members.heartbeat("c0")
    clock.now += 6  # c1 silent for 11 s
    state.expire()
    assert "c1" not in state.members.clients and len(state.space.segments) == 1
    meta = state.access.get_replicas("both")
    assert meta is not None and len(meta.replicas) == 1
    assert state.core.exists("one") == (only_c1[0].segment.client_id == "c0")
    assert state.members.heartbeat("c1") is False


def test_a_lost_segment_takes_what_only_it_held_in_bulk(clock: Clock) -> None:
    """A node's segment goes (its node dropped): objects with no other replica go with it (out of the table,
    the eviction order, the stored bytes, the puts in progress), the others keep their other replica;
    many at a time (kvstore.master.membership.DROP_CHUNK), each as _delete would."""
    from kvstore.master.service import membership

    state = make_state(clock, [("h0", 64 * MiB), ("h1", 64 * MiB)])
    state.members.register_client("w", "h2")
    chunk, membership.DROP_CHUNK = membership.DROP_CHUNK, 7  # several chunks
    try:
        on_c1 = []
        for i in range(40):
            placed = state.puts.put_start("w", f"k{i}", 64 << 10, i, 2 if i % 4 == 0 else 1, False)
            assert placed is not None
            if i % 5 == 4:
                continue  # left in progress
            state.puts.put_end("w", f"k{i}")
            if len(placed) == 1 and placed[0].segment.client_id == "c1":
                on_c1.append(f"k{i}")
        stored = state.ledger.stored_bytes
        in_progress_on_c1 = [
            m.key for m in state.core.pending.values() if {r.segment.client_id for r in m.replicas} == {"c1"}
        ]
        state.members.drop_client("c1")
    finally:
        membership.DROP_CHUNK = chunk
    assert on_c1 and in_progress_on_c1
    for key in on_c1 + in_progress_on_c1:
        assert key not in state.objects and key not in state.memory_order
    assert state.ledger.stored_bytes == stored - len(on_c1) * (64 << 10)
    assert state.core.pending.held("w")[0] == len(state.core.pending) == 8 - len(in_progress_on_c1)
    for i in range(0, 40, 4):  # two replicas: the one on c0 stays, readable
        meta = state.access.get_replicas(f"k{i}")
        if i % 5 != 4:
            assert meta is not None and [r.segment.client_id for r in meta.replicas] == ["c0"]
    assert len(state.memory_order) == sum(1 for k in state.objects if state.objects[k].complete)


def test_abandoned_put_is_reclaimed(clock: Clock) -> None:
    state = make_state(clock, [("h0", 2 * MiB)], put_timeout=30.0)
    state.puts.put_start("c0", "k", 2 * MiB, 1, 1, False)
    clock.now += 31
    state.members.heartbeat("c0")
    state.expire()
    assert not state.core.exists("k") and state.counters.reclaimed_puts == 1
    assert state.space.used == 2 * MiB  # until the node has fenced the late writer off
    fence(state)
    assert state.space.used == 0


def test_bad_arguments(clock: Clock) -> None:
    state = make_state(clock, [("h0", 2 * MiB)])
    with pytest.raises(InvalidArgumentError):
        state.puts.put_start("c0", "k", 0, 1, 1, False)
    with pytest.raises(InvalidArgumentError):
        state.puts.put_start("c0", "k", 10, 1, 0, False)
    with pytest.raises(NotEnoughSegmentsError):
        state.puts.put_start("c0", "k", 4 * MiB, 1, 1, False)  # larger than any segment
    with pytest.raises(NotFoundError):
        state.puts.put_start("ghost", "k", 10, 1, 1, False)
    with pytest.raises(InvalidArgumentError):
        state.members.mount_segment(
            MountSegment("c0", "127.0.0.1:7000", 1, MiB, "h0", 1 << 20)
        )  # already mounted


def test_config_validation() -> None:
    with pytest.raises(InvalidArgumentError):
        MasterConfig.load(low_watermark=0.9, high_watermark=0.5)
    with pytest.raises(InvalidArgumentError):
        MasterConfig.load(eviction_policy="nope").validate()
        MasterState(MasterConfig.load(eviction_policy="nope"))
    with pytest.raises(InvalidArgumentError):
        MasterConfig.load(unknown=1)


def test_prefix_lookup_stops_at_the_first_miss(clock: Clock) -> None:
    from kvstore.master.service.handlers import Handlers

    state = make_state(clock, [("h0", 8 * MiB)])
    put(state, "a")
    put(state, "c")  # stored, but its prefix ("b") is not
    handlers = Handlers(state)
    found = handlers.handle("get_replicas", {"keys": ["a", "b", "c"], "prefix": True}).value()  # (Packed)
    assert found[0] is not None and found[1:] == [None, None]
    c = state.objects["c"]
    assert c.lease_until == 0 and c.access_count == 0  # not looked up: no lease, no read counted
    assert handlers.handle("get_replicas", {"keys": ["a", "b", "c"]}).value()[2] is not None
    assert state.objects["c"].access_count == 1


@pytest.mark.parametrize("raw", ["nan", "inf"])
def test_master_config_refuses_non_finite_numbers(raw: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSTORE_MASTER_CLIENT_TTL", raw)  # NaN compares false: it passed every check
    with pytest.raises(InvalidArgumentError, match="client_ttl"):
        MasterConfig.load()


def test_the_masters_own_stall_is_nobodys_silence(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)], client_ttl=10.0, put_timeout=5.0)
    put(state, "kept")
    state.puts.put_start("c1", "in-flight", MiB, 1, 1, False)
    clock.now += 12.0  # the master was stopped for 12 s: longer than the TTL and the put timeout
    state.credit_stall(12.0)
    state.expire()
    assert set(state.members.clients) == {"c0", "c1"} and state.core.exists("kept")
    state.puts.put_end("c1", "in-flight")  # its writer could not reach the master either: still valid
    assert state.counters.stalls == 1 and state.counters.stalled_seconds == 12.0
    clock.now += 11.0  # real silence still counts
    state.expire()
    assert not state.members.clients and not state.core.exists("kept")


def test_segments_reported_unreachable_are_not_offered_nor_placed_on(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)], heartbeat_interval=1.0)
    both = put(state, "both", replicas=2)
    assert len(both) == 2
    only1 = state.puts.put_start("c1", "only-on-1", MiB, 1, 1, False)
    assert only1 is not None
    state.puts.put_end("c1", "only-on-1")
    dead = only1[0].segment
    state.suspicion.report_unreachable(
        dead.engine, "c1"
    )  # one client's word, and its node heartbeats: noted only
    assert dead.usable and state.counters.suspected_segments == 0
    state.suspicion.report_unreachable(dead.engine, "c1")  # the same client again is no second witness
    assert dead.usable
    state.suspicion.report_unreachable(
        dead.engine, "c2"
    )  # a second client, but one holding nothing: no witness
    assert dead.usable
    state.suspicion.probed(
        dead.engine, dead.client_id, "unreachable"
    )  # the master's own probe failed: suspect
    assert not dead.usable and state.counters.suspected_segments == 1
    assert state.core.offered(state.objects["both"]) == [r for r in both if r.segment is not dead]
    assert (
        state.core.exists("both")
        and not state.core.exists("only-on-1")
        and state.access.get_replicas("only-on-1") is None
    )
    assert [m.key for m in state.access.match_prefix(["both", "only-on-1"])] == ["both"]
    with pytest.raises(NotEnoughSegmentsError, match="1 suspected unreachable"):
        state.puts.put_start("c0", "two", MiB, 1, 2, False)  # not "no space": the cause is named
    placed = state.puts.put_start("c0", "one", MiB, 1, 1, False)
    assert placed is not None and placed[0].segment is not dead
    state.members.heartbeat(dead.client_id)  # right after the report: may have been in flight, proves nothing
    assert not dead.usable
    clock.now += 1.0
    state.members.heartbeat(dead.client_id)  # its node is alive after all
    assert dead.usable and state.core.exists("only-on-1") and not state.space.any_suspect()
    state.suspicion.report_unreachable(
        dead.engine, "c1"
    )  # older reports were disproved by the heartbeat: one
    assert not state.space.any_suspect()
    clock.now += 1.5  # (a heartbeat a little late is no evidence)
    state.expire()
    assert not state.space.any_suspect()
    clock.now += 0.6  # ... until the node misses a heartbeat (the housekeeping judges the reports again)
    state.expire()
    assert state.space.any_suspect()
    state.members.drop_client(dead.client_id)  # a suspect segment that goes away leaves no suspicion behind
    assert not state.space.any_suspect() and state.core.exists("both")


def test_reports_of_an_engine_without_segments_are_dropped(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)], heartbeat_interval=1.0)
    for i in range(1000):  # a client naming made-up engines holds no memory of them
        state.suspicion.report_unreachable(f"10.9.9.9:{i}", "c0")
        state.suspicion.report_unreachable(f"10.9.9.9:{i}", "c1")
    assert not state.suspicion._unreachable_reports and not state.space.any_suspect()


def test_one_request_is_bounded_and_stats_keep_count(clock: Clock) -> None:
    from kvstore.master.service.handlers import Handlers
    from kvstore.rpc import validate as v

    state = make_state(clock, [("h0", 64 * MiB)])
    handlers = Handlers(state)
    items = [[f"k{i}", 64, 1] for i in range(v.MAX_PUT_ITEMS + 1)]
    with pytest.raises(InvalidArgumentError, match=f"at most {v.MAX_PUT_ITEMS}"):
        handlers.handle("put_start", {"client_id": "c0", "items": items, "replicas": 1})
    with pytest.raises(InvalidArgumentError, match=f"at most {v.MAX_KEYS}"):
        handlers.handle("exists", {"keys": ["k"] * (v.MAX_KEYS + 1)})
    put(state, "a", MiB)
    put(state, "b", 2 * MiB)
    state.puts.put_start("c0", "pending", MiB, 1, 1, False)
    assert state.stats()["bytes"] == 3 * MiB  # kept as objects come and go, not summed per scrape
    state.removal.remove("a")
    state.puts.put_revoke("c0", "pending")
    assert state.stats()["bytes"] == 2 * MiB and state.stats()["objects"] == 1


def test_a_put_short_of_allocation_slots_waits_for_fences_instead_of_evicting_more(clock: Clock) -> None:
    """Slots of freed allocations return when the node acknowledges their fences: evicting more would not
    bring one sooner (it would only lose objects), so the put's reply waits for the acknowledgement."""
    from kvstore.master.service.handlers import Deferred, Handlers
    from kvstore.rpc import messages as m

    state = MasterState(MasterConfig.load(), clock=clock)
    state.members.register_client("c0", "h0")
    state.members.mount_segment(
        MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 4)
    )  # 4 slots for 8 MiB
    for i in range(4):
        put(state, f"k{i}")
    reply = Handlers(state).put_start(m.PutStart("c0", [m.PutItem("new", MiB, 1)], 1, False, 0))
    assert isinstance(reply, Deferred)
    assert state.counters.evictions == 1  # one victim; its slot is on its way back
    ready: list[bool] = []
    reply.on_ready(lambda: ready.append(True))
    fence(state)  # the node acknowledges the kill: the slot returns
    assert ready == [True]
    (result,) = started_items(reply.make_reply())
    assert result.code == 0 and state.counters.evictions == 1
    assert [state.core.exists(f"k{i}") for i in range(4)] == [False, True, True, True]


def test_fence_kills_are_handed_out_in_bounded_batches(clock: Clock) -> None:
    """A node is handed at most `limit` kills per take, unacknowledged ones first, so that it can always
    acknowledge a whole reply in one bounded request."""
    state = make_state(clock, [("h0", 8 * MiB)])
    for i in range(10):
        put(state, f"k{i}", 4096)
    state.removal.remove_all()
    fences = state.space.fences
    first = [k.id for k in fences.take("c0", 4)]
    assert len(first) == 4
    state.space.acknowledge("c0", first[:2])  # two applied, two not (a copy was still running)
    again = [k.id for k in fences.take("c0", 4)]
    assert again[:2] == first[2:] and len(again) == 4  # the unacknowledged first, then new ones
    state.space.acknowledge("c0", again)
    rest = [k.id for k in fences.take("c0", 100)]
    assert len(rest) == 4
    state.space.acknowledge("c0", rest)
    assert fences.stats()["fence_kills_outstanding"] == 0
    assert not fences.outstanding("c0")


def test_a_clients_puts_in_progress_are_bounded_in_objects_and_bytes(clock: Clock) -> None:
    """Past its limits a client's puts fail with TooManyPutsError and evict nothing; ending them gives
    the room back; other clients are not held to its count."""
    state = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)], client_put_objects=3)
    state.members.register_client("other", "h2")
    put(state, "old")
    for i in range(3):
        state.puts.put_start("c0", f"p{i}", 4096, i, 1, False)
    with pytest.raises(TooManyPutsError):
        state.puts.put_start("c0", "p3", 4096, 3, 1, False)
    state.puts.put_start("other", "q", 4096, 9, 1, False)  # another client's own count
    state.puts.put_end("c0", "p0")
    state.puts.put_start("c0", "p3", 4096, 3, 1, False)  # room again
    state.puts.put_start("other", "big", 7 * MiB, 1, 1, False)  # its first: may be as large as it likes
    with pytest.raises(TooManyPutsError):  # half of 16 MiB held already
        state.puts.put_start("other", "more", 2 * MiB, 1, 1, False)
    assert state.core.exists("old") and state.counters.evictions == 0
    state.members.drop_client("c0")
    assert state.core.pending.held("c0") == (0, 0)


def test_a_node_is_told_each_replica_it_holds_once_placed_and_never_after_its_kill(clock: Clock) -> None:
    """Told as the put places it (the node names it back only if its bytes match the checksum, so a
    put that never finished is a miss), sent until acknowledged, never after the replica's kill."""
    state = make_state(clock, [("h0", 8 * MiB)])
    state.puts.put_start("c0", "revoked", MiB, 6, 1, False)
    state.puts.put_revoke("c0", "revoked")
    state.puts.put_start("c0", "k", MiB, 7, 1, False)
    state.puts.put_start("c0", "gone", MiB, 8, 1, False)
    state.puts.put_end("c0", "gone")
    sent = [HeldReplica._make(h) for h in state.space.holds.take("c0", 10)]
    assert [(h.key, h.size, h.checksum) for h in sent] == [("k", MiB, 7), ("gone", MiB, 8)]
    state.puts.put_end("c0", "k")
    assert [HeldReplica._make(h) for h in state.space.holds.take("c0", 10)] == sent  # sent until acked
    state.removal.remove("gone")  # freed before the node acknowledged it: not sent again
    assert [h.key for h in holds_of(state)] == ["k"]
    assert holds_of(state) == []


def test_a_master_rebuilds_objects_from_what_a_node_names_back(clock: Clock) -> None:
    """A restarted master knows nothing; a node mounts its segment `restoring` and names its holds."""
    old = make_state(clock, [("h0", 8 * MiB)])
    for key in ("a", "b", "c"):
        put(old, key, MiB // 2)
    held = [(h.offset, h.slot, h.gen, h.key, h.size, h.checksum, h.pinned, h.replicas) for h in holds_of(old)]

    state = MasterState(MasterConfig.load(), clock=clock)
    state.members.register_client("n", "h0")
    seg = state.members.mount_segment(
        MountSegment("n", "127.0.0.1:7000", 1, 8 * MiB, "h0", 4096, restoring=True)
    )
    with pytest.raises(NotEnoughSegmentsError, match="1 being restored"):
        state.puts.put_start("n", "early", MiB, 1, 1, False)  # nothing is placed on it meanwhile
    conflicting = (held[0][0], held[0][1] + 100, held[0][2], "d", MiB // 2, 1, False, 1)  # space taken
    refused = state.members.restore_segment("n", seg, [*held, conflicting], last=True)
    assert refused == [conflicting[1]]
    assert sorted(state.objects) == ["a", "b", "c"] and all(state.core.exists(k) for k in "abc")
    assert [r.gen for r in state.objects["a"].replicas] == [held[0][2]]
    assert state.stats()["restored_objects"] == 3
    placed = state.puts.put_start("n", "after", MiB, 1, 1, False)  # new space, new slot, newer generation
    assert placed is not None
    assert placed[0].slot not in {h[1] for h in held} and placed[0].gen > max(h[2] for h in held)
    assert placed[0].offset >= 3 * (MiB // 2) or placed[0].offset + MiB <= held[0][0]
    with pytest.raises(InvalidArgumentError, match="not mounted to be restored"):
        state.members.restore_segment("n", seg, held, last=True)


def test_restored_objects_are_evicted_in_the_order_they_were_put_once_the_restore_ends(
    clock: Clock,
) -> None:
    """A node names what it holds newest first. Was: the eviction order took them in that order, so
    the newest objects were evicted first, even while the node was still naming the rest."""
    old = make_state(clock, [("h0", 8 * MiB)])
    for key in ("a", "b", "c", "d"):
        put(old, key, MiB // 2)
    held = [(h.offset, h.slot, h.gen, h.key, h.size, h.checksum, h.pinned, h.replicas) for h in holds_of(old)]
    newest_first = sorted(held, key=lambda h: -h[2])

    state = MasterState(MasterConfig.load(), clock=clock)
    state.members.register_client("n", "h0")
    seg = state.members.mount_segment(
        MountSegment("n", "127.0.0.1:7000", 1, 8 * MiB, "h0", 4096, restoring=True)
    )
    assert state.members.restore_segment("n", seg, newest_first[:2], last=False) == []
    assert list(state.policy.candidates()) == []  # none is evicted half-restored
    assert state.members.restore_segment("n", seg, newest_first[2:], last=True) == []
    assert list(state.policy.candidates()) == ["a", "b", "c", "d"]  # the oldest put goes first


def test_a_record_naming_another_value_of_a_known_key_is_refused(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)])
    put(state, "k", MiB)  # known: size MiB, its checksum
    state.members.register_client("n", "h1")
    seg = state.members.mount_segment(
        MountSegment("n", "127.0.0.1:7100", 1, 8 * MiB, "h1", 4096, restoring=True)
    )
    other = (0, 0, 5, "k", MiB, 12345, False, 1)
    same = (MiB, 1, 6, "k", MiB, state.objects["k"].checksum, False, 1)
    assert state.members.restore_segment("n", seg, [other, same], last=True) == [0]
    assert len(state.objects["k"].replicas) == 2  # the same value: a second replica of it


def test_a_batch_lookup_replies_what_a_reader_decodes(clock: Clock) -> None:
    """get_replicas' batch path builds the reply's records in the object table (locate_many): they must
    decode, through the wire, to the replica the put placed, with a lease; a miss stays None."""
    from kvstore import rpc
    from kvstore.master.service import reads

    state = make_state(clock, [("h0", 64 * MiB)])
    (placed,) = put(state, "k", size=4096)
    found = reads.locations(state.access, reads.look_up(state.access, state.disk, ["k", "nope"], "h0", False))
    hit, miss = m.GetReplicas.decode_reply(rpc.unpack(rpc.pack(found)[rpc.HEADER_SIZE :]))
    seg = placed.segment
    assert miss is None and (hit.size, hit.checksum) == (4096, hash("k") & 0xFFFF)
    assert hit.locations == [
        m.Location(m.MEMORY, seg.host_id, seg.engine, seg.region_id, placed.offset, placed.slot, placed.gen)
    ]
    assert state.objects["k"].lease_until == clock.now + state.config.lease_ttl
    assert state.counters.hits == 1 and state.counters.misses == 1
