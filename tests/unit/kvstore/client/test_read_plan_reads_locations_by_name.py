"""The usual batch read (kvstore.client.read_plan) takes its engine columns from each key's located
entry by the fields' declared names (kvstore.rpc.records.Location, ObjectLocation), not by positions
written in the client: every column of the plan is its field of each entry, whatever the values."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import pytest

from kvstore.client import fields, read_plan
from kvstore.client.buffers import BufferManager
from kvstore.rpc.records import MEMORY, Location, ObjectLocation
from transfer_engine import TransferEngine

HANDLES = {"node-a:7000": 11, "node-b:7001": 12}


class Peer(NamedTuple):
    handle: int


@pytest.fixture
def manager() -> Iterator[BufferManager]:
    with TransferEngine(transport="local") as engine:
        yield BufferManager(engine, 1 << 20)


def located(n: int, size: int) -> list[ObjectLocation]:
    """n objects of `size` bytes, every field of each location distinct from the others' and its own."""
    engines = list(HANDLES)
    return [
        ObjectLocation(
            size,
            1000 + i,
            [Location(MEMORY, f"host-{i % 2}", engines[i % 2], 50 + i, 4096 * (i + 3), 200 + i, 300 + 7 * i)],
        )
        for i in range(n)
    ]


def test_each_column_is_its_named_field_of_each_entry(manager: BufferManager) -> None:
    n, size = 6, 256
    array = np.zeros(n * size, dtype=np.uint8)
    manager.register(array)
    values = manager.values([[array[i * size : (i + 1) * size]] for i in range(n)], writable=True)
    found = located(n, size)
    plan = read_plan.plan(found, values, lambda name: Peer(HANDLES[name]), set())
    assert plan is not None
    places = [entry.locations[0] for entry in found]
    assert plan.sizes == [entry.size for entry in found]
    assert plan.expected == [entry.checksum for entry in found]
    assert plan.peers == [HANDLES[place.engine] for place in places]
    assert plan.regions == [place.region_id for place in places]
    assert plan.offsets == [place.offset for place in places]
    assert plan.slots == [place.slot for place in places]
    assert plan.gens == [place.gen for place in places]
    assert plan.local == [array.ctypes.data + i * size for i in range(n)]


def test_a_getter_follows_the_declared_place_of_its_field() -> None:
    class Reordered(NamedTuple):  # the same fields declared in another order
        gen: int
        offset: int
        engine: str

    record = Reordered(gen=9, offset=4096, engine="e:1")
    assert fields.field(Reordered, "gen")(record) == 9
    assert fields.field(Reordered, "engine")(record) == "e:1"
    with pytest.raises(ValueError):
        fields.field(Reordered, "region_id")  # a name the declaration lacks stops the import
