"""A batch of puts starts exactly as its items would one at a time: put_start places a run of new keys in
one call (kvstore.master.puts._start_run), and every item that is not a plain new put (stored already,
in progress, twice in the batch, fencing, past its client's limits, needing eviction or not fitting at
all) ends with the same outcome, the same placement, the same error."""

from __future__ import annotations

from typing import Any

import pytest

from kvstore.config import MasterConfig
from kvstore.errors import KVStoreError
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import MountSegment, PutItem

KiB, MiB = 1 << 10, 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(prelude: bool = True, **config: object) -> MasterState:
    state = MasterState(MasterConfig.load(**config), clock=Clock())
    for i, (host, size) in enumerate([("a", 4 * MiB), ("a", 3 * MiB), ("b", 2 * MiB)]):
        state.members.register_client(f"c{i}", host)
        state.members.mount_segment(MountSegment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, size, host, 1 << 20))
    if not prelude:
        return state
    # Before the batch: stored objects (to be offered again, or evicted), one put left in progress, and a
    # key removed while a reader held it (fencing).
    for i in range(6):
        state.puts.put_start("c0", f"old{i}", 512 * KiB, i, 1, False)
        state.puts.put_end("c0", f"old{i}")
    state.puts.put_start("c0", "busy", KiB, 1, 1, False)
    state.puts.put_start("c0", "leased", KiB, 1, 1, False)
    state.puts.put_end("c0", "leased")
    state.access.get_replicas("leased")
    state.removal.remove("leased", force=True)
    return state


def _outcome(result: Any) -> Any:
    if isinstance(result, KVStoreError):
        return type(result).__name__, str(result)
    if result is None:
        return None
    return [(r.segment.id, r.offset, r.slot) for r in result]


ITEMS = [
    PutItem(*item)
    for item in [(f"new{i}", 64 * KiB, i) for i in range(20)]
    + [("old0", 512 * KiB, 0), ("old1", 512 * KiB, 99), ("busy", KiB, 1), ("new3", 64 * KiB, 3)]
    + [("leased", KiB, 1), ("huge", 64 * MiB, 1)]
    + [(f"big{i}", 1 * MiB, i) for i in range(8)]  # past free room: evicts the old objects
    + [(f"late{i}", 32 * KiB, i) for i in range(10)]
]


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize(
    "limits",
    [{}, {"client_put_bytes": 64 * MiB}, {"client_put_bytes": 6 * MiB}, {"client_put_objects": 12}],
)
def test_a_batch_starts_as_its_items_would_one_at_a_time(replicas: int, limits: dict[str, int]) -> None:
    batched, single = _state(**limits), _state(**limits)
    out: list[Any] = []
    batched.puts.start_puts("c0", ITEMS, replicas, False, 0, False, out)
    one_by_one = []
    for key, size, checksum in ITEMS:
        try:
            one_by_one.append(single.puts.put_start("c0", key, size, checksum, replicas, False))
        except KVStoreError as exc:
            one_by_one.append(exc)
    assert [_outcome(r) for r in out] == [_outcome(r) for r in one_by_one]
    assert any(isinstance(r, list) for r in out) and any(isinstance(r, KVStoreError) for r in out)
    assert sorted(batched.objects) == sorted(single.objects)
    assert batched.counters.evictions == single.counters.evictions
    if limits.get("client_put_bytes") == 64 * MiB:  # no limit in the way: the big ones evicted
        assert batched.counters.evictions > 0
    # Every started one ends, and holds the same replicas, in both.
    keys = [key for (key, _, _), r in zip(ITEMS, out, strict=True) if isinstance(r, list)]
    assert batched.puts.put_end_many("c0", keys) == single.puts.put_end_many("c0", keys) == [None] * len(keys)
    for key in keys:
        assert _outcome(batched.objects[key].replicas) == _outcome(single.objects[key].replicas)


def test_fewer_replicas_when_segments_are_short_the_same_way() -> None:
    batched, single = _state(False, client_put_bytes=64 * MiB), _state(False, client_put_bytes=64 * MiB)
    items = [PutItem(f"k{i}", 64 * KiB, i) for i in range(5)] + [
        PutItem("wide", 5 * MiB // 2, 1)
    ]  # 2 hold it
    out: list[Any] = []
    batched.puts.start_puts("c0", items, 3, False, 2, False, out)
    one_by_one = [single.puts.put_start("c0", k, s, c, 3, False, min_replicas=2) for k, s, c in items]
    assert [_outcome(r) for r in out] == [_outcome(r) for r in one_by_one]
    assert [len(r) for r in out] == [3] * 5 + [2]


def test_a_restore_takes_back_a_batch_as_it_would_one_record_at_a_time() -> None:
    """A node names what it holds after the master restarted; the records of keys the master does not
    know are taken in one run (kvstore.master.restore._restore_unknown). Conflicts inside the batch (a
    key named twice, a slot named twice, overlapping space, a slot past the table) end as they would one
    record at a time: the first wins, the rest are refused."""
    records = [(i * 64 * KiB, i, 100 + i, f"k{i}", 64 * KiB, i, False, 1) for i in range(12)]
    records += [
        (40 * 64 * KiB, 40, 140, "k3", 64 * KiB, 3, False, 1),  # k3 again: one replica per segment
        (41 * 64 * KiB, 5, 141, "x41", 64 * KiB, 1, False, 1),  # slot 5 taken by k5
        (2 * 64 * KiB + KiB, 42, 142, "x42", 64 * KiB, 1, False, 1),  # overlaps k2's space
        (43 * 64 * KiB, 1 << 20, 143, "x43", 64 * KiB, 1, False, 1),  # past the fence table
        (44 * 64 * KiB, 44, 144, "x44", 64 * KiB, 1, True, 9),  # pinned, asked for more replicas
    ]

    def restored(batch_size: int) -> tuple[list[int], dict[str, object]]:
        state = MasterState(MasterConfig.load(), clock=Clock())
        state.members.register_client("n", "h")
        seg = state.members.mount_segment(
            MountSegment("n", "127.0.0.1:7100", 1, 8 * MiB, "h", 4096, restoring=True)
        )
        refused: list[int] = []
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            refused += state.members.restore_segment("n", seg, batch, last=start + batch_size >= len(records))
        table = {
            key: (_outcome(meta.replicas), meta.complete, meta.pinned, meta.base_replicas)
            for key, meta in ((k, state.objects[k]) for k in state.objects)
        }
        return refused, table

    assert restored(len(records)) == restored(1)
    refused, table = restored(len(records))
    assert sorted(refused) == [5, 40, 42, 1 << 20]
    assert table["x44"][2:] == (True, min(9, MasterConfig.load().max_replicas))
    assert table["k3"][0] == [(1, 3 * 64 * KiB, 3)] and len(table) == 13


def test_a_slot_freed_while_its_segment_is_restored_is_free_once_the_restore_ends() -> None:
    """An object taken back is removed before its segment's restore ends: its node applies the kill, and
    its fence slot is free afterwards (the restore's end once counted it as taken for good)."""
    state = MasterState(MasterConfig.load(), clock=Clock())
    state.members.register_client("n", "h")
    seg_id = state.members.mount_segment(
        MountSegment("n", "127.0.0.1:7100", 1, 8 * MiB, "h", 4096, restoring=True)
    )
    records = [(i * 64 * KiB, i, 100 + i, f"k{i}", 64 * KiB, i, False, 1) for i in range(3, -1, -1)]
    assert state.members.restore_segment("n", seg_id, records, last=False) == []
    state.removal.remove("k3", force=True)
    kills = [k.id for k in state.space.fences.take("n", 1 << 20)]
    state.space.acknowledge("n", kills)  # the node applied the kill of slot 3
    assert state.members.restore_segment("n", seg_id, [], last=True) == []
    seg = state.space.segments[seg_id]
    assert seg.slots.in_use == seg.allocations == 3  # (slot 3 was the highest: it is handed out anew)


def test_a_long_batch_of_scattered_new_puts_starts_as_one_at_a_time() -> None:
    """Runs look at a window of items that doubles while runs fill it (kvstore.master.puts.RUN_LEAST):
    a long batch, new keys among stored ones, starts exactly as its items would one at a time."""
    batched, single = _state(client_put_bytes=64 * MiB), _state(client_put_bytes=64 * MiB)
    stored = [PutItem(f"old{i % 6}", 512 * KiB, i % 6) for i in range(300)]  # offered again, the same bytes
    items = [stored[i] if i % 3 == 1 else PutItem(f"n{i}", 4 * KiB, i) for i in range(300)]
    items += [
        PutItem(f"m{i}", 4 * KiB, i) for i in range(700)
    ]  # then a long run of new ones: windows 16, ...
    out: list[Any] = []
    batched.puts.start_puts("c0", items, 1, False, 0, False, out)
    one_by_one = [single.puts.put_start("c0", k, s, c, 1, False) for k, s, c in items]
    assert [_outcome(r) for r in out] == [_outcome(r) for r in one_by_one]
    assert sum(1 for r in out if r is None) == 100  # the stored ones, offered again with the same bytes
