"""Store groups in the master (kvstore.master.groups): the members `<group>#<i>of<n>` of one block are
visible all at once or not at all, leased as one, evicted and removed as one, and restored only whole."""

from __future__ import annotations

import pytest

from kvstore.blocks import group_keys, member_key
from kvstore.config import MasterConfig
from kvstore.errors import ObjectBusyError, ObjectNotFoundError
from kvstore.master.ledger.changes import GroupsHidden, GroupsShown
from kvstore.master.service import reads
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import HeldReplica, MountSegment

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_state(clock: Clock, size: int = 16 * MiB, writers: int = 1, **config: object) -> MasterState:
    state = MasterState(MasterConfig.load(**config), clock=clock)
    state.members.register_client("c0", "h0")
    state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, size, "h0", 1 << 20))
    for i in range(1, writers):
        state.members.register_client(f"w{i}", f"h{i}")
    return state


def put(state: MasterState, key: str, size: int = MiB, client: str = "c0") -> None:
    state.puts.put_start(client, key, size, 7, 1, False)
    state.puts.put_end(client, key)


def visible(state: MasterState, keys: list[str]) -> list[bool]:
    """What every reader's path says of each key: exists, the batch check, get_replicas and the table's
    batch lookup agree (the test fails if they do not)."""
    one = [state.core.exists(k) for k in keys]
    assert state.access.exists_many(keys) == one
    assert [state.access.get_replicas(k) is not None for k in keys] == one
    located = reads.locations(state.access, reads.look_up(state.access, state.disk, keys, "h0", False))
    from kvstore import rpc

    decoded = rpc.unpack(rpc.pack(located)[rpc.HEADER_SIZE :])
    assert [x is not None for x in decoded] == one
    return one


def test_members_are_invisible_until_the_last_is_committed_then_all_at_once(clock: Clock) -> None:
    """Members written by different clients (tensor-parallel ranks): none is seen before the last put_end;
    that one put_end shows all three in one ledger change."""
    state = make_state(clock, writers=3)
    shown: list[list[str]] = []
    state.ledger.watch(GroupsShown, lambda rs: shown.extend(r.keys for r in rs))
    keys = group_keys("blk", 3)
    put(state, keys[0], client="c0")
    put(state, keys[2], client="w2")
    assert visible(state, keys) == [False, False, False]
    assert state.access.match_prefix([keys[0]]) == []
    state.puts.put_start("w1", keys[1], MiB, 7, 1, False)
    assert visible(state, keys) == [False, False, False]  # (the last one's put in progress)
    state.puts.put_end("w1", keys[1])
    assert visible(state, keys) == [True, True, True]
    assert shown == [keys]  # one record, every member
    assert [m.key for m in state.access.match_prefix(keys)] == keys
    # Plain keys are not affected, and a member put again with the same bytes is "already stored".
    put(state, "plain")
    assert visible(state, ["plain"]) == [True]
    assert state.puts.put_start("c0", keys[0], MiB, 7, 1, False) is None


def test_a_lease_on_one_member_holds_the_whole_group(clock: Clock) -> None:
    state = make_state(clock, lease_ttl=5.0)
    keys = group_keys("blk", 2)
    for k in keys:
        put(state, k)
    clock.now += 10  # the puts' own leases are long gone
    reads.look_up(state.access, state.disk, [keys[0]], "h0", False)  # the batch path
    assert state.objects[keys[1]].lease_until >= clock.now + 5
    with pytest.raises(ObjectBusyError):
        state.removal.remove(keys[1])
    clock.now += 10
    state.access.get_replicas(keys[1])  # the one-key path
    assert state.objects[keys[0]].lease_until >= clock.now + 5


def test_removing_one_member_removes_the_group(clock: Clock) -> None:
    state = make_state(clock, lease_ttl=1.0)
    keys = group_keys("blk", 3)
    for k in keys:
        put(state, k)
    put(state, "other#0of2")  # another group, incomplete
    clock.now += 2
    state.removal.remove(keys[1])
    assert all(k not in state.objects for k in keys)
    assert "other#0of2" in state.objects
    with pytest.raises(ObjectNotFoundError):
        state.removal.remove(keys[0])


def test_eviction_takes_a_group_whole_and_counts_its_bytes(clock: Clock) -> None:
    state = make_state(clock, size=8 * MiB, lease_ttl=1.0)
    keys = group_keys("old", 4)
    for k in keys:
        put(state, k)
    clock.now += 2
    put(state, "new", 4 * MiB)
    clock.now += 2
    before = state.counters.evicted_bytes
    put(state, "newer", 2 * MiB)  # room for it: the LRU victim is a member of "old", whose 4 go together
    assert [k in state.objects for k in keys] == [False] * 4
    assert state.counters.evicted_bytes - before == 4 * MiB
    assert state.space.used == 6 * MiB and state.ledger.stored_bytes == 6 * MiB


def test_an_incomplete_group_is_first_to_go_and_does_not_live_forever(clock: Clock) -> None:
    state = make_state(clock, size=8 * MiB, lease_ttl=1.0, put_timeout=10.0, client_ttl=1000.0)
    put(state, "a", 2 * MiB)  # the least recently used
    put(state, member_key("dead", 0, 2), 2 * MiB)  # its writer of member 1 died
    clock.now += 11  # a put timeout without a new member
    put(state, "b", 4 * MiB)  # full
    put(state, "c", 2 * MiB)  # room: the incomplete group goes, not "a"
    assert "a" in state.objects and member_key("dead", 0, 2) not in state.objects
    assert state.counters.incomplete_groups_dropped == 1
    put(state, member_key("slow", 0, 2), MiB // 2)
    clock.now += 30
    state.expire()
    assert member_key("slow", 0, 2) in state.objects  # younger than INCOMPLETE_PUT_TIMEOUTS put timeouts
    clock.now += 11
    state.expire()
    assert member_key("slow", 0, 2) not in state.objects
    assert state.stats()["groups_incomplete"] == 0


def test_a_lost_member_hides_its_group_and_a_new_put_of_it_shows_it_again(clock: Clock) -> None:
    state = MasterState(MasterConfig.load(), clock=clock)
    state.members.register_client("n1", "h1")
    state.members.mount_segment(MountSegment("n1", "127.0.0.1:7001", 1, MiB, "h1", 1 << 20))
    hidden: list[str] = []
    state.ledger.watch(GroupsHidden, lambda rs: hidden.extend(k for r in rs for k in r.keys))
    keys = group_keys("blk", 2)
    put(state, keys[1], client="n1")  # n1's segment is full with it
    state.members.register_client("c0", "h0")
    state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 16 * MiB, "h0", 1 << 20))
    put(state, keys[0])
    assert visible(state, keys) == [True, True]
    state.members.drop_client("n1")  # the node is lost with one member
    assert keys[0] in state.objects and keys[1] not in state.objects
    assert visible(state, keys) == [False, False]  # not a partial hit
    assert set(hidden) == set(keys)
    put(state, keys[1])  # a later writer puts the missing member again
    assert visible(state, keys) == [True, True]


def _held(state: MasterState, client: str) -> list[tuple]:
    held = [HeldReplica._make(h) for h in state.space.holds.take(client, 1 << 20)]
    state.space.holds.acknowledge(client, max((h.seq for h in held), default=0))
    return [(h.offset, h.slot, h.gen, h.key, h.size, h.checksum, h.pinned, h.replicas) for h in held]


def test_a_restarted_master_shows_a_group_restored_whole_and_hides_one_missing_a_member(clock: Clock) -> None:
    old = make_state(clock)
    whole, partial = group_keys("whole", 2), group_keys("part", 3)
    for k in whole + partial:
        put(old, k)
    records = [r for r in _held(old, "c0") if r[3] != partial[1]]  # the node lost one member's record
    state = MasterState(MasterConfig.load(), clock=clock)
    state.members.register_client("n", "h0")
    seg = state.members.mount_segment(
        MountSegment("n", "127.0.0.1:7000", 1, 16 * MiB, "h0", 4096, restoring=True)
    )
    assert state.members.restore_segment("n", seg, records[:2], last=False) == []
    assert state.members.restore_segment("n", seg, records[2:], last=True) == []
    assert visible(state, whole) == [True, True]
    assert visible(state, partial) == [False, False, False]
    assert state.access.match_prefix([partial[0]]) == []
