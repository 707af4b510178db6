"""Removals are durable across restores: what a master removed (or evicted) is never taken back when a
node names it later, from another node's segment, from the same node's other tier, or from a disk's
records (kvstore.master.tombstones, honoured by kvstore.master.restore). With a fake clock."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError, ProtocolError
from kvstore.master.ledger.tombstones import Tombstones
from kvstore.master.service.handlers import Deferred
from kvstore.master.service.state import MasterState
from kvstore.node.disk_index import DiskIndex, IndexEntry, decode_all, encode
from kvstore.rpc import messages as m
from kvstore.rpc.messages import HeldReplica, MountSegment
from tests.unit.kvstore.master.service.test_node_work import poll, two_nodes
from tests.unit.kvstore.master.state_helpers import Clock, MiB, holds_of, make_state, put

Record = tuple[int, int, int, str, int, int, bool, int]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def records(held: list[HeldReplica]) -> list[Record]:
    return [(h.offset, h.slot, h.gen, h.key, h.size, h.checksum, h.pinned, h.replicas) for h in held]


def before_restart(clock: Clock, keys: list[str]) -> tuple[list[Record], list[Record]]:
    """A master with two nodes puts `keys` with 2 replicas; what each node was told it holds."""
    old = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)])
    for key in keys:
        put(old, key, MiB // 4, replicas=2)
    return records(holds_of(old, "c0")), records(holds_of(old, "c1"))


def restarted(clock: Clock, **config: object) -> MasterState:
    """A master that lost its table, its two nodes registered again (not mounted yet)."""
    state = MasterState(MasterConfig.load(**config), clock=clock)
    for i in range(2):
        state.members.register_client(f"n{i}", f"h{i}")
    return state


def mount(state: MasterState, node: int) -> int:
    return state.members.mount_segment(
        MountSegment(f"n{node}", f"127.0.0.1:{7000 + node}", 1, 8 * MiB, f"h{node}", 4096, True)
    )


def test_a_key_removed_while_a_restarted_master_restores_is_not_taken_back_from_a_second_node(
    clock: Clock,
) -> None:
    """2 nodes x 2 replicas: the first node names its replicas, the keys are removed (its kills land),
    then the second node names its own. Was: each removed key came back as unknown from the second node."""
    keys = [f"k{i}" for i in range(6)]
    held0, held1 = before_restart(clock, keys)
    state = restarted(clock)
    assert state.members.restore_segment("n0", mount(state, 0), held0, last=True) == []
    state.removal.remove("k1")
    assert sorted(state.removal.remove_all()) == sorted(set(keys) - {"k1"})
    state.puts.put_start("n0", "k9", MiB // 4, 99, 1, False)  # a new key meanwhile: not removed, kept
    state.puts.put_end("n0", "k9")

    refused = state.members.restore_segment("n1", mount(state, 1), held1, last=True)
    assert sorted(refused) == sorted(r[1] for r in held1)  # every one: its node forgets them
    assert sorted(state.objects) == ["k9"]
    assert not any(state.core.exists(k) for k in keys)
    assert state.stats()["restore_refused_removed"] == len(keys)


def test_a_key_kept_is_taken_back_from_both_nodes_and_one_removed_from_neither(clock: Clock) -> None:
    keys = ["a", "b", "c"]
    held0, held1 = before_restart(clock, keys)
    state = restarted(clock)
    seg0 = mount(state, 0)
    first = [r for r in held0 if r[3] == "a"]
    assert state.members.restore_segment("n0", seg0, first, last=False) == []
    state.removal.remove("a")  # named by one node only so far
    assert state.members.restore_segment("n0", seg0, [r for r in held0 if r[3] != "a"], last=True) == []
    assert state.members.restore_segment("n1", mount(state, 1), held1, last=True) == [
        r[1] for r in held1 if r[3] == "a"
    ]
    assert sorted(state.objects) == ["b", "c"]
    assert all(len(state.objects[k].replicas) == 2 for k in ("b", "c"))


def test_an_object_removed_after_its_disk_record_came_back_is_not_taken_back_from_memory(
    clock: Clock,
) -> None:
    """The same node's two tiers: its disk offers the record first (the object is on disk only), the
    key is removed, then its memory names the replica. Was: the object came back."""
    held0, _ = before_restart(clock, ["x", "y"])
    state = restarted(clock)
    disk = state.disk.disk_space.mount("n0", "h0", 32 * MiB, "/nvme/tier", restoring=True)
    on_disk = [(i * MiB, r[3], r[4], r[5], r[2]) for i, r in enumerate(held0)]
    assert state.members.restore_disk("n0", on_disk, last=True) == 2
    assert state.objects["x"].disk is not None and state.objects["x"].replicas == []
    state.removal.remove("x")
    assert [(d.offset, d.key) for d in state.disk.take_drops("n0")] == [(0, "x")]
    refused = state.members.restore_segment("n0", mount(state, 0), held0, last=True)
    assert refused == [r[1] for r in held0 if r[3] == "x"]
    assert "x" not in state.objects and state.objects["y"].disk is not None
    assert len(state.objects["y"].replicas) == 1 and disk.restoring is False


def test_a_disk_record_of_an_object_removed_since_is_refused_and_its_node_told_to_forget_it(
    clock: Clock,
) -> None:
    """Memory first, then the key is removed, then the disk offers its record: refused (the record was
    written from a replica of a generation the tombstone covers), and the node is told to drop it so no
    later master is offered it either. A record written from a newer replica (the key put again) is
    taken."""
    held0, _ = before_restart(clock, ["x", "y"])
    state = restarted(clock)
    assert state.members.restore_segment("n0", mount(state, 0), held0, last=True) == []
    gen = {r[3]: r[2] for r in held0}
    state.removal.remove("x")
    state.removal.remove("y")
    state.disk.disk_space.mount("n0", "h0", 32 * MiB, "/nvme/tier", restoring=True)
    sizes = {r[3]: (r[4], r[5]) for r in held0}
    offered = [
        (0, "x", *sizes["x"], gen["x"]),
        (MiB, "y", *sizes["y"], 0),  # written before records named their generation: the oldest
        (2 * MiB, "y", *sizes["y"], state.space.fences.current + 5),  # from a replica put after
    ]
    assert state.members.restore_disk("n0", offered, last=True) == 1
    assert state.objects["y"].disk is not None and state.objects["y"].disk.offset == 2 * MiB
    assert "x" not in state.objects
    assert sorted((d.offset, d.key) for d in state.disk.take_drops("n0")) == [(0, "x"), (MiB, "y")]


def test_an_evicted_object_is_not_taken_back_and_a_lost_one_is(clock: Clock) -> None:
    """Eviction leaves a tombstone like a removal; a segment that went away (its node restarting) does
    not: what it held is what its node names back when it returns."""
    held0, _ = before_restart(clock, ["e", "lost"])
    state = restarted(clock)
    assert state.members.restore_segment("n0", mount(state, 0), held0, last=True) == []
    assert state.removal.evict_one(leased_too=True)  # the policy's first: "e", restored first
    evicted = [k for k in ("e", "lost") if k not in state.objects]
    assert len(evicted) == 1
    state.members.drop_client("n0")  # its node restarts: the other key is lost with its segment
    assert sorted(state.objects) == []
    state.members.register_client("n0", "h0")
    refused = state.members.restore_segment("n0", mount(state, 0), held0, last=False)
    assert refused == [r[1] for r in held0 if r[3] == evicted[0]]
    assert sorted(state.objects) == sorted({"e", "lost"} - set(evicted))


def test_a_key_removed_while_its_node_was_cut_off_is_not_taken_back_when_it_returns_late(
    clock: Clock,
) -> None:
    """Review item 1, no master restart: node c0 holds K and is cut off past the client TTL (dropped, its
    kills thrown away); K is removed through c1; long after (the tombstone used to lapse at 2x the TTL)
    c0 rejoins and names K from its catalog. Was: K taken back as unknown."""
    state = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)], client_ttl=10.0)
    put(state, "k", MiB // 4, replicas=2)
    held0 = records(holds_of(state, "c0"))
    assert [r[3] for r in held0] == ["k"]
    state.members.drop_client("c0")  # silent past the TTL
    state.removal.remove("k")  # acknowledged through c1
    for _ in range(3):
        clock.now += 25.0
        state.removal.remove_all()  # lapsing is looked at: nothing restores
    state.members.register_client("c0", "h0")
    seg = state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 4096, True))
    refused = state.members.restore_segment("c0", seg, held0, last=True)
    assert refused == [held0[0][1]]
    assert not state.core.exists("k")


def test_a_removal_crowded_out_of_the_tombstones_still_refuses_and_a_lost_key_comes_back(
    clock: Clock,
) -> None:
    """Past the bound the oldest removal goes but raises the floor: an unknown key at or below it is
    refused, unless it went with its segment (a node restarting) and was not removed since."""
    state = make_state(clock, [("h0", 8 * MiB)])  # c0's segment alone: every key placed there
    book = state.space.fences.tombstones
    book._removed.limit = 2
    for key in ("gone", "lost", "again"):
        put(state, key, MiB // 4)
    held = {r[3]: r for r in records(holds_of(state, "c0"))}
    state.members.register_client("c1", "h1")
    state.members.mount_segment(MountSegment("c1", "127.0.0.1:7001", 1, 8 * MiB, "h1", 1 << 20))
    state.removal.remove("gone")
    state.members.drop_client("c0")  # "lost" and "again" go with the segment: not removed
    state.members.register_client("c0", "h0")
    seg = state.members.mount_segment(MountSegment("c0", "127.0.0.1:7000", 1, 8 * MiB, "h0", 4096, True))
    state.puts.put_start("c1", "again", MiB // 4, 8, 1, False)  # put again elsewhere, and removed
    state.puts.put_end("c1", "again")
    state.removal.remove("again")
    state.removal.remove_all()
    for i in range(3):  # crowds both out
        state.puts.put_start("c1", f"x{i}", 64, 9, 1, False)
        state.puts.put_end("c1", f"x{i}")
        state.removal.remove(f"x{i}")
    assert not book.covers("gone", held["gone"][2]) and book.floor >= held["again"][2]
    refused = state.members.restore_segment("c0", seg, [held["again"], held["gone"], held["lost"]], last=True)
    assert sorted(refused) == sorted([held["again"][1], held["gone"][1]])
    assert sorted(state.objects) == ["lost"]


def test_removal_tombstones_stay_and_the_others_lapse_but_never_during_a_restore(clock: Clock) -> None:
    held0, held1 = before_restart(clock, ["a", "b"])
    state = restarted(clock, client_ttl=10.0)
    book = state.space.fences.tombstones
    assert state.members.restore_segment("n0", mount(state, 0), held0, last=True) == []
    state.removal.remove("a")
    book.learn([("n", 1)], clock.now + 20.0)  # a node named it: an earlier master's
    seg1 = mount(state, 1)  # restoring: named nothing yet
    clock.now += 25.0
    state.removal.remove("b")  # lapsing is looked at here: a restore is open, so "n" stays
    assert len(book) == 3
    assert state.members.restore_segment("n1", seg1, held1, last=True) == [r[1] for r in held1]
    clock.now += 15.0
    state.removal.remove_all()  # nothing restores now: "n" lapsed, the removals stay
    assert len(book) == 2 and book.covers("b", 1) and book.covers("a", 1) and not book.covers("n", 1)


def test_tombstones_are_bounded_oldest_dropped_first() -> None:
    book = Tombstones(limit=3, evicted_limit=2)
    book.bury(["a", "b"], 10, 100.0)
    book.bury(["c", "a"], 20, 100.0)  # "a" again: newer, goes to the end
    book.bury(["d"], 30, 100.0)
    assert len(book) == 3 and book.stats()["tombstones_dropped"] == 1
    assert not book.covers("b", 1)  # the oldest went
    assert book.floor == 10 and book.forgotten("b", 10) and not book.forgotten("b", 11)
    assert book.covers("a", 20) and not book.covers("a", 21)  # a generation after the removal passes
    assert book.covers("d", 0) and not book.covers("zz", 0)
    for i in range(5):  # evictions by the thousand crowd out no removal
        book.bury([f"e{i}"], 40, 100.0, evicted=True)
    assert book.covers("d", 30) and book.covers("e4", 40) and not book.covers("e0", 40)
    assert book.stats()["tombstones"] == 3 and book.stats()["tombstones_evicted"] == 2
    assert book.generation("e4") == 0 and book.generation("d") == 30  # only removals go to nodes
    book.lose(["b"], 100.0)
    assert not book.forgotten("b", 10)
    book.lapse(99.0, lambda: False)
    assert len(book) == 5
    book.lapse(100.0, lambda: True)
    assert len(book) == 5
    book.lapse(100.0, lambda: False)
    assert len(book) == 3 and book.forgotten("b", 10)  # the evictions and the lost key lapsed


def test_a_disk_index_entry_keeps_the_generation_it_was_written_from(tmp_path: object) -> None:
    """Entries name their generation; one written before that (no generation) reads back as 0, the
    oldest, which any tombstone of its key covers."""
    old_style = encode(IndexEntry(4096, "old", 10, 7))
    new_style = encode(IndexEntry(8192, "new", 10, 8, 2**63 + 5))
    assert decode_all(old_style + new_style) == [
        IndexEntry(4096, "old", 10, 7, 0),
        IndexEntry(8192, "new", 10, 8, 2**63 + 5),
    ]
    assert decode_all(new_style[:-1]) == []  # torn: reading stops
    index = DiskIndex(f"{tmp_path}/disk.index")
    index.append([IndexEntry(0, "k", 5, 1, 77)])
    index.forget([(0, "k", 0)])
    index.append([IndexEntry(0, "k", 5, 1, 99)])
    assert index.read() == [IndexEntry(0, "k", 5, 1, 99)]


def test_restore_disk_records_name_a_generation_checked_like_the_rest() -> None:
    parse = m.RestoreDisk.parse
    assert parse({"client_id": "c", "records": [[0, "k", 5, 1]]}).records == [(0, "k", 5, 1, 0)]
    assert parse({"client_id": "c", "records": [[0, "k", 5, 1, 9]]}).records == [(0, "k", 5, 1, 9)]
    for bad in ([0, "k", 5, 1, -1], [0, "k", 5, 1, "9"], [0, "k", 5, 1, 2**64], [0, "k", 5, 1, 9, 9]):
        with pytest.raises(InvalidArgumentError):
            parse({"client_id": "c", "records": [bad]})


def test_a_removal_waits_for_the_disk_node_to_take_the_drop_of_its_record() -> None:
    """An object in memory on one node and on disk on another: the removal answered once the memory
    node applied its kill, while the disk node had not even been sent the drop of its record (a drop
    was sent once, never acknowledged), so a master killed after the reply had the record offered back
    to the next one. Now the reply waits for the disk node too (durable_wait at most), and the drop is
    sent until acknowledged."""
    handlers = two_nodes(nodes=1)
    state = handlers.state
    state.puts.put_start("c0", "k", MiB, 7, 1, False)
    state.puts.put_end("c0", "k")
    work = poll(handlers)
    assert isinstance(work, m.NodeWork)
    poll(handlers, held_through=work.holds[-1][0])
    state.members.register_client("d", "h9")
    state.disk.disk_space.mount("d", "h9", 32 * MiB, "/nvme/tier", restoring=True)
    assert state.members.restore_disk("d", [(4096, "k", MiB, 7, 0)], last=True) == 1  # its disk copy
    reply = handlers.remove(m.Remove(keys=["k"]))
    assert isinstance(reply, Deferred)
    ready: list[bool] = []
    reply.on_ready(lambda: ready.append(True))
    work = poll(handlers)
    assert isinstance(work, m.NodeWork)
    poll(handlers, acked=[k for order in work.fences for k in order.kills])
    assert ready == []  # the memory node forgot it; the disk node did not hear of it yet
    first = poll(handlers, "d")
    assert isinstance(first, m.NodeWork) and [(d.offset, d.key) for d in first.disk_drops] == [(4096, "k")]
    again = poll(handlers, "d")  # not acknowledged: sent again
    assert isinstance(again, m.NodeWork) and again.disk_drops == first.disk_drops and ready == []
    done = poll(handlers, "d", dropped_through=first.disk_drops[0].seq)
    assert ready == [True] and isinstance(done, m.NodeWork) and done.disk_drops == []
    assert [r.code for r in reply.make_reply()] == [0]


@pytest.mark.parametrize("drop", [[4096, "k", 1], [4096, "k", "1", 0], [4096, 7, 1, 0], ["4096", "k", 1, 0]])
def test_a_node_refuses_a_malformed_disk_drop(drop: list[object]) -> None:
    good: list[object] = [4096, "k", 3, 9]
    decoded = m.AwaitWork.decode_reply([0, [], [], [], [good], [], []]).disk_drops
    assert decoded == [m.DiskDrop(4096, "k", 3, 9)]
    with pytest.raises(ProtocolError, match="malformed DiskDrop"):
        m.AwaitWork.decode_reply([0, [], [], [], [good, drop], [], []])
