"""A client reading disk-only records straight from a node's file: into the caller's memory when it can,
through scratch otherwise (padding never lands in the caller's memory), unreadable files retried later."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from kvstore.client.disk_reads import RETRY_SECONDS, DiskReader
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import PAGE as DISK_PAGE
from kvstore.rpc.disk_record import data_offset
from transfer_engine.disk import DiskFile


def aligned(nbytes: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)


def record_at(path: Path | str, record_offset: int) -> m.Location:
    return m.Location(m.DISK, "h", "", 0, data_offset(record_offset), 0, 0, str(path))


def write_records(path: Path, values: list[np.ndarray]) -> list[int]:
    """Each value as a record (a header page, then the bytes, page-padded with 0xEE); their offsets."""
    offsets, at = [], 0
    with DiskFile(str(path), "4MiB") as f:
        for v in values:
            pages = -(-v.nbytes // DISK_PAGE) * DISK_PAGE
            record = aligned(DISK_PAGE + pages)
            record[:] = 0xEE
            record[DISK_PAGE : DISK_PAGE + v.nbytes] = v
            f.write(record.ctypes.data, at, record.nbytes)
            offsets.append(at)
            at += record.nbytes
    return offsets


def test_records_land_in_the_callers_pieces_and_nothing_beyond(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    values = [rng.integers(0, 256, n, dtype=np.uint8) for n in (2 * DISK_PAGE, 5000, 3 * DISK_PAGE)]
    path = tmp_path / "tier"
    offsets = write_records(path, values)
    where = [record_at(path.resolve(), o) for o in offsets]
    whole = aligned(2 * DISK_PAGE)  # page-aligned, whole pages: read straight into it
    guarded = np.zeros(5000 + 64, np.uint8)  # not whole pages: through scratch, only 5000 bytes copied
    split = [np.zeros(DISK_PAGE + 100, np.uint8), np.zeros(2 * DISK_PAGE - 100, np.uint8)]  # two pieces
    items = [
        ([whole.ctypes.data], [whole.nbytes], values[0].nbytes, where[0]),
        ([guarded.ctypes.data], [5000], 5000, where[1]),
        ([p.ctypes.data for p in split], [p.nbytes for p in split], values[2].nbytes, where[2]),
    ]
    reader = DiskReader()
    assert reader.read(items) == [True, True, True]
    assert np.array_equal(whole, values[0]) and np.array_equal(guarded[:5000], values[1])
    assert not guarded[5000:].any()  # the record's padding never reached the caller's memory
    assert np.array_equal(np.concatenate(split), values[2])
    outside = record_at(path.resolve(), 4 << 20)
    assert reader.read([([whole.ctypes.data], [whole.nbytes], whole.nbytes, outside)]) == [False]
    assert reader.read(items[:1]) == [True]  # the file is opened afresh after a failed read
    reader.close()


def test_an_unreadable_file_is_tried_again_later(tmp_path: Path) -> None:
    now = [0.0]
    reader = DiskReader(clock=lambda: now[0])
    path = tmp_path / "later"
    value = np.full(DISK_PAGE, 7, np.uint8)
    buffer = aligned(DISK_PAGE)
    item = ([buffer.ctypes.data], [DISK_PAGE], DISK_PAGE, record_at(path, 0))
    assert reader.read([item]) == [False]  # no such file (yet)
    write_records(path, [value])
    assert reader.read([item]) == [False]  # not asked again so soon
    now[0] += RETRY_SECONDS + 1
    assert reader.read([item]) == [True] and np.array_equal(buffer, value)
    reader.close()
