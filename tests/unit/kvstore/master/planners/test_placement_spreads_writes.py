"""Placement spreads writes (issue 42, section 4): a segment that joins a nearly full cluster is not flooded
with every write (it was, under "the emptiest segment first"), segments fill evenly from empty, and no
two replicas of one object share a segment. The master is the real one (MasterState: batch put_start,
put_end, its nodes' fence acknowledgements, its housekeeping's expiry and watermark eviction), driven on
its own clock."""

from __future__ import annotations

from collections import Counter

from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import MountSegment, PutItem
from tests.unit.kvstore.master.state_helpers import Clock, fence, make_state

KiB, MiB = 1 << 10, 1 << 20
SEGMENT = 32 * MiB
OBJECT = 4 * KiB  # 8,192 per segment: enough writes that a share is measured, not drawn
TICK = 0.1  # seconds between housekeeping rounds (the server's is of this order)


def _put_batch(state: MasterState, client: str, keys: list[str], size: int, replicas: int = 1) -> Counter:
    """One client's batch of puts, started and ended as a Store does; the segment ids that took replicas."""
    out: list = []
    items = [PutItem(key, size, i) for i, key in enumerate(keys)]
    state.puts.start_puts(client, items, replicas, False, 0, False, out)
    for placed in out:
        assert isinstance(placed, list), placed  # every put found room (evicting if need be)
    assert state.puts.put_end_many(client, keys) == [None] * len(keys)
    return Counter(r.segment.id for placed in out for r in placed)


def _tick(state: MasterState, clock: Clock) -> None:
    """What the master's housekeeping does each period, and its nodes acknowledging the fences of what
    was evicted (their slots come back)."""
    clock.now += TICK
    for client in state.members.clients:
        state.members.clients[client].last_seen = clock.now
    state.expire()
    state.removal.evict_to_watermark()
    for client in list(state.members.clients):
        fence(state, client)


def _fill(state: MasterState, clock: Clock, objects: int, prefix: str) -> None:
    for first in range(0, objects, 1000):
        _put_batch(state, "c0", [f"{prefix}{i}" for i in range(first, min(first + 1000, objects))], OBJECT)
        _tick(state, clock)


def _used(state: MasterState) -> dict[int, int]:
    return {s.id: s.allocator.used for s in state.space}


def test_a_segment_joining_a_nearly_full_cluster_takes_at_most_twice_its_fair_share() -> None:
    clock = Clock()
    state = make_state(clock, [(f"h{i}", SEGMENT) for i in range(4)])
    _fill(state, clock, int(4 * SEGMENT * 0.9) // OBJECT, "old")  # 4 segments 90% full
    assert all(0.89 <= used / SEGMENT <= 0.91 for used in _used(state).values()), _used(state)
    state.members.register_client("c4", "h4")
    state.members.mount_segment(MountSegment("c4", "127.0.0.1:7004", 1, SEGMENT, "h4", 1 << 20))
    (newcomer,) = [s.id for s in state.space if s.client_id == "c4"]
    # Its first 10 s under a put load: 25 puts every 0.1 s from one client (250 a second, 10 MiB in all,
    # less than the room the four others have left, as in a cluster whose window is small next to its
    # memory; the master's eviction runs as it would).
    writes: Counter = Counter()
    for tick in range(int(10 / TICK)):
        writes += _put_batch(state, "c0", [f"new{tick}-{i}" for i in range(25)], OBJECT)
        _tick(state, clock)
    share = writes[newcomer] / sum(writes.values())
    assert share <= 2 * (1 / 5), f"the newcomer took {share:.0%} of the writes ({dict(writes)})"
    assert all(writes[s.id] > 0 for s in state.space)  # every segment kept taking writes


def test_segments_fill_evenly_from_empty() -> None:
    clock = Clock()
    state = make_state(clock, [(f"h{i}", SEGMENT) for i in range(5)])
    _fill(state, clock, int(5 * SEGMENT * 0.6) // OBJECT, "k")  # 60% of the pool, 24,576 puts
    used = _used(state)
    mean = sum(used.values()) / len(used)
    assert max(used.values()) <= 1.3 * mean and min(used.values()) >= 0.7 * mean, used


def test_segments_of_different_sizes_fill_in_proportion() -> None:
    clock = Clock()
    state = make_state(clock, [("h0", SEGMENT), ("h1", SEGMENT), ("h2", 4 * SEGMENT)])
    _fill(state, clock, int(6 * SEGMENT * 0.5) // OBJECT, "k")  # half the pool
    shares = [s.allocator.used / s.size for s in state.space]
    assert max(shares) <= 1.3 * min(shares), shares


def test_no_two_replicas_of_an_object_share_a_segment_and_hosts_differ_while_they_can() -> None:
    clock = Clock()
    # Six segments on three hosts: three replicas go to three hosts; four must share a host, never a segment.
    state = make_state(clock, [(f"h{i % 3}", SEGMENT) for i in range(6)])
    for replicas in (2, 3, 4):
        out: list = []
        items = [PutItem(f"r{replicas}-{i}", OBJECT, i) for i in range(500)]
        state.puts.start_puts("c0", items, replicas, False, 0, False, out)
        for placed in out:
            segments = [r.segment for r in placed]
            assert len(placed) == replicas and len({s.id for s in segments}) == replicas
            assert len({s.host_id for s in segments}) == min(replicas, 3)
        _tick(state, clock)
