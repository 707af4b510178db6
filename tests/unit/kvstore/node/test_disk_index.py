"""The disk tier's index file: latest entry per record offset, a torn tail ignored, compaction while
the node runs keeps it proportional to the disk."""

from __future__ import annotations

from pathlib import Path

from kvstore.node.disk_index import COMPACT_SLACK, DiskIndex, IndexEntry, decode_all, encode


def test_latest_entry_per_offset_and_a_torn_tail_is_where_reading_stops(tmp_path: Path) -> None:
    index = DiskIndex(str(tmp_path / "tier.index"))
    assert index.read() == []
    index.append([IndexEntry(0, "a", 10, 1), IndexEntry(8192, "b", 20, 2)])
    index.append([IndexEntry(0, "c", 30, 3)])  # a later record at offset 0 replaced "a"
    with open(index.path, "ab") as f:
        f.write(encode(IndexEntry(16384, "d", 40, 4))[:-3])  # killed mid-append
    assert sorted(DiskIndex(index.path).read()) == [IndexEntry(0, "c", 30, 3), IndexEntry(8192, "b", 20, 2)]
    data = Path(index.path).read_bytes()
    damaged = data[:5] + bytes([data[5] ^ 1]) + data[6:]
    assert decode_all(damaged) == []  # the first entry's hash fails: nothing after it is trusted


def test_the_index_is_compacted_while_running(tmp_path: Path) -> None:
    index = DiskIndex(str(tmp_path / "tier.index"))
    index.read()
    live = 100
    for round_ in range(
        3 * COMPACT_SLACK // live
    ):  # records rewritten at the same offsets, round after round
        index.append([IndexEntry(i * 8192, f"k{round_}/{i}", 100, round_) for i in range(live)])
        assert index.entries_in_file <= 2 * live + COMPACT_SLACK + live
    entries = DiskIndex(index.path).read()
    assert sorted(e.offset for e in entries) == [i * 8192 for i in range(live)]
    assert {e.checksum for e in entries} == {3 * COMPACT_SLACK // live - 1}  # the latest round's
    assert Path(index.path).stat().st_size < (2 * live + COMPACT_SLACK + live) * 64


def test_a_tombstone_ends_only_the_record_it_names(tmp_path: Path) -> None:
    index = DiskIndex(str(tmp_path / "tier.index"))
    index.read()
    index.append([IndexEntry(0, "a", 10, 1), IndexEntry(8192, "b", 20, 2)])
    index.forget([(0, "a", 0), (8192, "not-b", 0)])  # the second names another key: b's record stays
    assert DiskIndex(index.path).read() == [IndexEntry(8192, "b", 20, 2)]
    index.append([IndexEntry(0, "c", 30, 3)])  # a new record where a's was
    assert sorted(DiskIndex(index.path).read()) == [IndexEntry(0, "c", 30, 3), IndexEntry(8192, "b", 20, 2)]
