"""The node's catalog of what its segment holds: replayed from its file, checked against the bytes."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import xxhash

from kvstore.node.catalog import SegmentCatalog
from kvstore.rpc.messages import RESTORE_FIELDS, HeldReplica


def held(seq: int, slot: int, gen: int, offset: int, data: np.ndarray, key: str) -> HeldReplica:
    digest = xxhash.xxh3_64_intdigest(data.data)
    return HeldReplica(seq, 1, offset, slot, gen, key, data.size, digest, False, 1)


def test_a_hold_less_its_seq_and_region_is_the_record_a_restore_names() -> None:
    assert HeldReplica._fields[2:] == RESTORE_FIELDS  # the catalog keeps h[2:] as it is


def test_a_catalog_file_is_replayed_and_only_intact_objects_are_offered(tmp_path: Path) -> None:
    memory = np.random.default_rng(1).integers(0, 256, 1 << 16, dtype=np.uint8)
    path = str(tmp_path / "segment.held")
    catalog = SegmentCatalog(path)
    catalog.hold([held(1, s, 10 + s, s * 4096, memory[s * 4096 : (s + 1) * 4096], f"k{s}") for s in range(8)])
    catalog.drop([3, 4], [13, 4])  # slot 3 killed in its generation; slot 4's kill is of an older one
    catalog.close()
    memory[2 * 4096 + 7] ^= 0xFF  # k2's bytes were overwritten

    again = SegmentCatalog(path)
    offered = again.verified(memory)
    assert sorted(r[3] for r in offered) == ["k0", "k1", "k4", "k5", "k6", "k7"]
    assert [r[2] for r in offered] == sorted((r[2] for r in offered), reverse=True)  # newest first
    again.close()
    assert len(SegmentCatalog(path)) == 6  # the failed one is forgotten in the file too


def test_a_torn_last_record_ends_the_replay(tmp_path: Path) -> None:
    memory = np.zeros(1 << 14, dtype=np.uint8)
    path = tmp_path / "segment.held"
    catalog = SegmentCatalog(str(path))
    catalog.hold([held(1, 0, 5, 0, memory[:100], "kept")])
    catalog.hold([held(2, 1, 6, 4096, memory[4096:4196], "torn")])
    catalog.close()
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    assert [r[3] for r in SegmentCatalog(str(path)).verified(memory)] == ["kept"]
    path.write_bytes(b"\xc1garbage")
    assert len(SegmentCatalog(str(path))) == 0


def test_a_slot_killed_twice_in_one_order_is_dropped_once(tmp_path: Path) -> None:
    memory = np.zeros(1 << 14, dtype=np.uint8)
    catalog = SegmentCatalog(str(tmp_path / "segment.held"))
    catalog.hold([held(1, 0, 5, 0, memory[:100], "a"), held(2, 1, 5, 4096, memory[4096:4196], "b")])
    catalog.drop([0, 0, 1], [5, 6, 4])  # slot 1's kill is of an older generation: it stays
    assert len(catalog) == 1
    catalog.close()
    assert [r[3] for r in SegmentCatalog(str(tmp_path / "segment.held")).verified(memory)] == ["b"]


def test_batches_of_every_array_width_are_replayed_from_the_file(tmp_path: Path) -> None:
    # a batch's file record is written from records packed one by one: its array header must be msgpack's
    # at each width (fixarray, array 16, array 32)
    memory = np.zeros(4, dtype=np.uint8)
    path = str(tmp_path / "segment.held")
    catalog = SegmentCatalog(path)
    slot = 0
    for n in (1, 15, 16, 65535, 65536):
        catalog.hold([held(1, slot + i, 1, 0, memory, f"k{slot + i}") for i in range(n)])
        slot += n
    catalog.close()
    again = SegmentCatalog(path)
    assert len(again) == slot
    assert sorted(r[1] for r in again.verified(memory)) == list(range(slot))


def test_the_held_records_stay_out_of_the_garbage_collectors_walks() -> None:
    # a node holds a record per object: a container the collector tracks is walked whole by every full
    # collection (80 ms at 1.5M objects, on the thread that acknowledges holds)
    catalog = SegmentCatalog()
    memory = np.zeros(4, dtype=np.uint8)
    catalog.hold([held(1, s, 1, 0, memory, f"k{s}") for s in range(100)])
    catalog.drop([5], [1])
    assert not gc.is_tracked(catalog._entries)
    assert len(catalog) == 99
