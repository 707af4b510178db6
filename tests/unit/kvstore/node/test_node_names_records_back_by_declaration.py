"""A node names back what it holds as the declared records (kvstore.rpc.node_requests): the segment's
catalog offers RestoreRecords and the removals it remembers as Removals, a disk's index its intact
entries as DiskRecords and its removals as Removals, each field by name. The wire is what it was: a
RestoreSegment or RestoreDisk of named records packs to the very frame the same request of plain tuples
made, and the master parses it back to the same records."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from kvstore.node.catalog import SegmentCatalog
from kvstore.node.disk import disk_records
from kvstore.node.disk_index import TOMBSTONE, DiskIndex, IndexEntry
from kvstore.rpc import framing
from kvstore.rpc import messages as m


def frame(request: Any) -> bytes:
    """The frame a node's MasterClient sends for `request` (its id 7)."""
    return framing.pack([7, request.METHOD, request.params()])


def parsed(request: Any) -> Any:
    """The request the master makes of that frame."""
    _id, method, params = framing.unpack(frame(request)[4:])
    return m.REQUESTS[method].parse(params)


def test_a_segment_offers_restore_records_and_removals_by_name(tmp_path: Path) -> None:
    memory = np.random.default_rng(3).integers(0, 256, 1 << 15, dtype=np.uint8)
    holds = [
        m.HeldReplica(
            seq=s + 1,
            region_id=9,
            offset=s * 4096,
            slot=100 + s,
            gen=20 + s,
            key=f"held-{s}",
            size=1000 + s,
            checksum=xxhash.xxh3_64_intdigest(memory[s * 4096 : s * 4096 + 1000 + s].data),
            pinned=s % 2 == 0,
            replicas=1 + s,
        )
        for s in range(4)
    ]
    catalog = SegmentCatalog(str(tmp_path / "segment.held"))
    catalog.hold(holds)
    catalog.drop([103], [23], buried=[23])  # held-3 removed while held: remembered
    catalog.close()
    again = SegmentCatalog(str(tmp_path / "segment.held"))
    offered = again.verified(memory)
    removed = again.removed()
    again.close()

    assert all(type(r) is m.RestoreRecord for r in offered)
    by_slot = {h.slot: h for h in holds}
    for record in offered:
        hold = by_slot[record.slot]
        assert {f: getattr(record, f) for f in m.RestoreRecord._fields} == {
            f: getattr(hold, f) for f in m.RestoreRecord._fields
        }
    assert sorted(r.key for r in offered) == ["held-0", "held-1", "held-2"]
    assert removed == [m.Removal(key="held-3", generation=23)] and type(removed[0]) is m.Removal

    request = m.RestoreSegment(client_id="node-1", segment_id=5, records=offered, last=True, removed=removed)
    plain = m.RestoreSegment(
        client_id="node-1",
        segment_id=5,
        records=[tuple(r) for r in offered],  # type: ignore[misc]  # (what nodes sent before)
        last=True,
        removed=[tuple(r) for r in removed],  # type: ignore[misc]
    )
    assert frame(request) == frame(plain)
    back = parsed(request)
    assert back.records == offered and all(type(r) is m.RestoreRecord for r in back.records)
    assert back.removed == removed


def test_a_disk_offers_disk_records_and_removals_by_name(tmp_path: Path) -> None:
    entries = [
        IndexEntry(offset=4096 * (i + 1), key=f"disk-{i}", size=10 + i, checksum=7 * i, gen=i)
        for i in range(3)
    ]
    records = disk_records(entries)
    assert all(type(r) is m.DiskRecord for r in records)
    for entry, record in zip(entries, records, strict=True):
        assert (record.offset, record.key, record.size, record.checksum, record.gen) == (
            entry.offset,
            entry.key,
            entry.size,
            entry.checksum,
            entry.gen,
        )
    index = DiskIndex(str(tmp_path / "disk.index"))
    index.append([IndexEntry(0, "gone", TOMBSTONE, int(time.time()) + 600, 12)])  # (its until as checksum)
    removed = index.removed()
    assert removed == [m.Removal(key="gone", generation=12)] and type(removed[0]) is m.Removal

    request = m.RestoreDisk(client_id="node-1", records=records, last=False, removed=removed)
    plain = m.RestoreDisk(
        client_id="node-1",
        records=[tuple(r) for r in records],  # type: ignore[misc]
        last=False,
        removed=[tuple(r) for r in removed],  # type: ignore[misc]
    )
    assert frame(request) == frame(plain)
    back = parsed(request)
    assert back.records == records and all(type(r) is m.DiskRecord for r in back.records)
    assert back.removed == removed
