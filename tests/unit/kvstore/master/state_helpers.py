"""What the master's unit tests share: a fake clock, a state over a few segments, and the node's side of
a put, a fence and a hold (were in test_master_state; the ledger, planner and service tests use them)."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed
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


def make_state(clock: Clock, segments: list[tuple[str, int]], **config: object) -> MasterState:
    state = MasterState(MasterConfig.load(**config), clock=clock)
    for i, (host, size) in enumerate(segments):
        client = f"c{i}"
        state.members.register_client(client, host)
        state.members.mount_segment(MountSegment(client, f"127.0.0.1:{7000 + i}", 1, size, host, 1 << 20))
    return state


def fence(state: MasterState, client: str = "c0") -> list[int]:
    """Plays the node of `client`: takes its kills and acknowledges them; returns their ids."""
    ids = [k.id for k in state.space.fences.take(client, 1 << 20)]
    state.space.acknowledge(client, ids)
    return ids


def put(state: MasterState, key: str, size: int = MiB, replicas: int = 1, pin: bool = False) -> list:
    placed = state.puts.put_start("c0", key, size, hash(key) & 0xFFFF, replicas, pin)
    state.puts.put_end("c0", key)
    return placed or []


def started_items(reply: object) -> list[m.ItemResult]:
    """A put_start reply (the handler encodes it in C++: Packed) as a client decodes it."""
    assert isinstance(reply, Packed), reply
    return m.PutStart.decode_reply(reply.value())


def ended_items(reply: object) -> list[m.ItemResult]:
    """A put_end reply (the handler encodes it in C++: Packed) as a client decodes it."""
    assert isinstance(reply, Packed), reply
    return m.PutEnd.decode_reply(reply.value())


def holds_of(state: MasterState, client: str = "c0") -> list:
    """Plays the node of `client`: takes the replicas it is told it holds and acknowledges them."""
    held = [HeldReplica._make(h) for h in state.space.holds.take(client, 1 << 20)]
    state.space.holds.acknowledge(client, max((h.seq for h in held), default=0))
    return held
