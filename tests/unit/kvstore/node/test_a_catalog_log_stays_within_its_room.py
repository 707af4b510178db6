"""A node's catalog is a log (a record per hold and per drop batch) compacted once mostly dead: by count
alone that came only after 65,536 records, so a segment churning small values outgrew the 1 MiB its node
reserved beside it on a small tmpfs and the catalog fell back to memory (review F10). With a byte bound
(max_log_bytes, half the room reserved: kvstore.node.segment_memory.catalog_room) the file is compacted
before it passes it, the old file and its compacted copy fit in the room together, and what it names
back is exactly what is held."""

from __future__ import annotations

import os
from pathlib import Path

import msgpack

from kvstore.node import catalog as catalog_module
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.segment_memory import CATALOG_ROOM, catalog_room
from kvstore.rpc.messages import HeldReplica

SLOTS = 4096  # a small segment's fence table: what it can hold at once
VALUE = 256


def _churn(catalog: SegmentCatalog, puts: int, batch: int, sizes: list[int]) -> dict[int, tuple[int, str]]:
    """`puts` holds of new keys in batches, each evicting the oldest (a drop of its slot first), as a full
    segment taking small values does; returns what is held: slot -> (generation, key). Records the file's
    size after every write into `sizes` (the compaction's new file counted too while it is there)."""
    held: dict[int, tuple[int, str]] = {}
    gen = 0
    for start in range(0, puts, batch):
        slots = [(start + i) % SLOTS for i in range(batch)]
        old = [s for s in slots if s in held]
        if old:
            catalog.drop(old, [held[s][0] for s in old])
        records = []
        for i, slot in enumerate(slots):
            gen += 1
            key = f"churn/0x{start + i:016x}"
            held[slot] = (gen, key)
            records.append(HeldReplica(gen, 1, slot * VALUE, slot, gen, key, VALUE, gen, False, 1))
        catalog.hold(records)
        sizes.append(os.path.getsize(catalog.path))
    return held


def _named(catalog: SegmentCatalog) -> dict[int, tuple[int, str]]:
    return {r[1]: (r[2], r[3]) for r in map(msgpack.unpackb, catalog._entries.values())}


def test_churn_keeps_the_catalog_and_its_compaction_within_its_room(tmp_path: Path) -> None:
    path = str(tmp_path / "segment.held")
    room = catalog_room(7 << 20)
    assert room == CATALOG_ROOM  # the review's 7 MiB segment
    catalog = SegmentCatalog(path, max_log_bytes=room // 2)
    sizes: list[int] = []
    held = _churn(catalog, 40_000, 500, sizes)
    assert catalog.path == path and not catalog.lost  # never given up
    batch_bytes = 2 * 500 * 64  # one hold batch and one drop batch, generously
    assert max(sizes) <= room // 2 + batch_bytes, max(sizes)
    assert min(sizes[len(sizes) // 2 :]) < room // 4  # compacted along the way, not only at open
    # a compaction has the old log and its copy (what is held) on the file system at once
    assert room // 2 + batch_bytes + catalog._snapshot <= room
    catalog.close()
    again = SegmentCatalog(path)
    assert len(again) == SLOTS
    assert _named(again) == held  # exactly what is held, by slot: generation and key


def test_without_the_bound_the_same_churn_outgrows_the_room(tmp_path: Path) -> None:
    """The bound is what keeps it small: by record count alone (the code before) the log passes the room."""
    catalog = SegmentCatalog(str(tmp_path / "segment.held"))
    sizes: list[int] = []
    _churn(catalog, 40_000, 500, sizes)
    assert max(sizes) > CATALOG_ROOM
    assert 2 * len(sizes) < catalog_module.COMPACT_MIN  # (the count rule never came into it)
