"""A disk node acknowledges the drop of a removed object's record only once it is persisted (review item
2, cause 1): the removal is answered on that acknowledgement, so a SIGKILL between the drop's arrival and
its index write must leave the master waiting, never a record a restarted master takes back.

The node's real work channel (kvstore.node.work_channel) talks to the real master state in process: the
session below only carries its calls to the master's handlers, as the wire would."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kvstore.errors import ProtocolError
from kvstore.master.service.handlers import Deferred, Handlers
from kvstore.node.catalog import TOMB_SECONDS
from kvstore.node.disk_index import DiskIndex, IndexEntry
from kvstore.node.work_channel import WorkChannel
from kvstore.rpc import messages as m
from tests.unit.kvstore.master.service.test_node_work import poll, two_nodes
from tests.unit.kvstore.master.service.test_removal_tombstones import clock, mount, records, restarted
from tests.unit.kvstore.master.state_helpers import Clock, MiB, holds_of, make_state, put

__all__ = ["clock"]  # (the fixture)


@dataclass
class _Terms:
    registration: int
    heartbeat_interval: float = 1.0


@dataclass
class _Master:
    handlers: Handlers
    epoch: int = 0

    def call(self, request: m.AwaitWork, timeout: float = 0.0, long_poll: bool = False) -> Any:
        reply = self.handlers.await_work(request)
        return reply.make_reply() if isinstance(reply, Deferred) else reply


@dataclass
class _Config:
    rpc_timeout: float = 1.0


@dataclass
class _Wire:
    """What WorkChannel asks of its session, carried to the master's handlers in process."""

    client_id: str
    terms: _Terms
    master: _Master
    config: _Config = field(default_factory=_Config)
    closed: bool = False


def _disk_only(handlers: Handlers) -> int:
    """Node "d" holds the only copy of "k", a disk record; returns its registration."""
    state = handlers.state
    state.puts.put_start("c0", "k", MiB, 7, 1, False)
    state.puts.put_end("c0", "k")
    work = poll(handlers)
    assert isinstance(work, m.NodeWork)
    poll(handlers, held_through=work.holds[-1][0])
    state.members.register_client("d", "h9")
    state.disk.disk_space.mount("d", "h9", 32 * MiB, "/nvme/tier", restoring=True)
    assert state.members.restore_disk("d", [(4096, "k", MiB, 7, 0)], last=True) == 1
    state.removal.remove("k")  # its memory replica's kill and its record's drop are queued
    return state.members.clients["d"].registration


def test_a_disk_drop_is_acknowledged_only_once_the_disk_persisted_it() -> None:
    """Was: the channel acknowledged the drop (dropped_through) on the next exchange after it arrived,
    before the disk worker marked the record dead."""
    handlers = two_nodes(nodes=1)
    registration = _disk_only(handlers)
    wire = _Wire("d", _Terms(registration), _Master(handlers))
    channel = WorkChannel(wire, lambda _: [], lambda _: None, lambda _: None, lambda _: [])  # type: ignore[arg-type]
    taken: list[m.DiskDrop] = []
    channel.disk = lambda drops, orders: taken.extend(drops)  # the disk worker, not persisting yet
    channel.flush()
    channel._exchange(0.0)  # a second exchange: the drop is still not persisted
    assert [(d.offset, d.key) for d in taken] == [(4096, "k"), (4096, "k")]  # sent until acknowledged
    assert handlers.state.disk.take_drops("d") != []
    channel.report_dropped(taken[0].seq, registration + 2)  # another registration's numbering: ignored
    assert handlers.state.disk.take_drops("d") != []
    channel.report_dropped(taken[0].seq, registration)  # persisted: acknowledged at once
    assert handlers.state.disk.take_drops("d") == []


def test_a_disk_drop_names_its_removal_and_a_malformed_one_is_refused() -> None:
    handlers = two_nodes(nodes=1)
    _disk_only(handlers)
    (drop,) = handlers.state.disk.take_drops("d")
    assert drop.buried == handlers.state.space.fences.tombstones.generation("k") > 0
    assert m.AwaitWork.decode_reply([0, [], [], [], [[4096, "k", 3, 0]], [], []]).disk_drops[0].buried == 0
    for bad in ([4096, "k", 3, "1"], [4096, "k", 3, -1], [4096, "k", 3, 2**64], [4096, "k", 3]):
        with pytest.raises(ProtocolError, match="malformed DiskDrop"):
            m.AwaitWork.decode_reply([0, [], [], [], [bad], [], []])


def test_a_disk_index_remembers_removals_across_reopening_and_rewrites_and_they_lapse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = DiskIndex(str(tmp_path / "tier.index"))
    index.append([IndexEntry(0, "k", 5, 1, 77), IndexEntry(4096, "j", 5, 1, 78)])
    index.forget([(0, "k", 90), (4096, "j", 0)])  # "k" removed (its removal covers 90), "j" evicted
    again = DiskIndex(index.path)
    assert again.read() == [] and again.removed() == [("k", 90)]
    again.rewrite([IndexEntry(8192, "k", 5, 2, 95)])  # "k" put and demoted again: its newer record lives
    third = DiskIndex(index.path)
    assert third.read() == [IndexEntry(8192, "k", 5, 2, 95)] and third.removed() == [("k", 90)]
    later = time.time() + TOMB_SECONDS + 1
    monkeypatch.setattr(time, "time", lambda: later)
    assert third.removed() == []
    third.rewrite(third.read())
    assert DiskIndex(index.path).read() == [IndexEntry(8192, "k", 5, 2, 95)]


def test_a_removal_a_disk_remembers_keeps_a_memory_replica_that_missed_its_kill_from_coming_back(
    clock: Clock,
) -> None:
    """A memory replica on n0 and a disk record on n1; the removal's kill never reaches n0 (stopped: the
    removal is answered after durable_wait), n1 persists the drop; the master restarts. Was: n0 named
    the replica to the new master and the object came back. Now n1's disk names the removal: the
    replica is refused when named after it, and the object removed again when named before it."""
    for disk_first in (True, False):
        old = make_state(clock, [("h0", 8 * MiB)])
        put(old, "k", MiB // 4)
        held0 = records(holds_of(old, "c0"))
        old.members.register_client("c1", "h1")
        old.disk.disk_space.mount("c1", "h1", 32 * MiB, "/nvme/tier", restoring=True)
        assert old.members.restore_disk("c1", [(0, "k", MiB // 4, held0[0][5], held0[0][2])], last=True) == 1
        old.removal.remove("k")
        (drop,) = old.disk.take_drops("c1")
        removed = [("k", drop.buried)]

        state = restarted(clock)  # n0 still holds the replica, n1's index the removal
        state.disk.disk_space.mount("n1", "h1", 32 * MiB, "/nvme/tier", restoring=True)
        seg = mount(state, 0)
        if disk_first:
            assert state.members.restore_disk("n1", [], last=True, removed=removed) == 0
            assert state.members.restore_segment("n0", seg, held0, last=True) == [held0[0][1]]
        else:
            assert state.members.restore_segment("n0", seg, held0, last=True) == []
            assert state.core.exists("k")
            assert state.members.restore_disk("n1", [], last=True, removed=removed) == 0
        assert not state.core.exists("k") and "k" not in state.objects
