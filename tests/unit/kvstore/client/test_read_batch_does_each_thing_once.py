"""A batch read (kvstore.client.read_batch.ReadBatch) does its per-batch work once per batch, not once per
key or once per step: the engines to avoid are asked for once for the column round and the rounds after
it, and the values read from disk files on this host are hashed in one call for the batch. A real
embedded store (master and segment in this process) reads; the disk records are written by the test
into a real file, as a node's disk tier writes them."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvstore import Store
from kvstore.client import read_batch
from kvstore.client.read_batch import MISS, ReadBatch
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import PAGE, data_offset
from transfer_engine import checksum
from transfer_engine.disk import DiskFile


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store.embedded("64MiB") as store:
        yield store


class Counted:
    """Calls through to `fn` (the real one), counting them."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.fn(*args)


def test_a_batch_asks_for_the_engines_to_avoid_once(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [f"avoid-once/{i}" for i in range(6)]
    values = [np.full(3000 + i, i + 1, np.uint8) for i in range(6)]
    assert store.batch_put_from(keys, values) == [0] * 6
    avoid = Counted(store.reports.avoid)
    monkeypatch.setattr(store.reports, "avoid", avoid)
    # Unregistered buffers: not the column round's case, so every key goes on to the replica rounds.
    out = [np.zeros(4096, np.uint8) for _ in keys]
    assert store.batch_get_into(keys, out) == [v.nbytes for v in values]
    assert all(np.array_equal(o[: v.nbytes], v) for o, v in zip(out, values, strict=True))
    assert avoid.calls == 1


def aligned(nbytes: int) -> np.ndarray:
    return np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)


def disk_records(path: Path, values: list[np.ndarray]) -> list[m.Location]:
    """Each value as a disk record (a header page, then its bytes, page-padded) and where a reader on this
    host finds it."""
    where, at = [], 0
    with DiskFile(str(path), "4MiB") as f:
        for value in values:
            record = aligned(PAGE + -(-value.nbytes // PAGE) * PAGE)
            record[PAGE : PAGE + value.nbytes] = value
            f.write(record.ctypes.data, at, record.nbytes)
            where.append(m.Location(m.DISK, "this-host", "", 0, data_offset(at), 0, 0, str(path.resolve())))
            at += record.nbytes
    return where


def test_disk_reads_on_this_host_are_hashed_once_per_batch(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(7)
    values = [rng.integers(0, 256, n, dtype=np.uint8) for n in (PAGE, 5000, 3 * PAGE, 700)]
    where = disk_records(tmp_path / "tier", values)
    sums = [checksum.xxh3_each([v.ctypes.data], [v.nbytes])[0] for v in values]
    sums[3] ^= 1  # the last record no longer holds what its location says: a miss, never its bytes
    found = [m.ObjectLocation(v.nbytes, s, [w]) for v, s, w in zip(values, sums, where, strict=True)]
    keys = [f"disk-once/{i}" for i in range(4)]  # (absent from the master: the failed one is a miss)
    out = [aligned(4 * PAGE) for _ in keys]
    hashed = Counted(read_batch.checksums)
    monkeypatch.setattr(read_batch, "checksums", hashed)
    buffers = store.buffers.values([[o] for o in out], writable=True)
    try:
        results = ReadBatch(store.reads.tools, keys, buffers, found, [False] * 4).run()
    finally:
        store.buffers.release_values(buffers)
    assert results == [v.nbytes for v in values[:3]] + [MISS]
    assert all(np.array_equal(o[: v.nbytes], v) for o, v in zip(out[:3], values[:3], strict=True))
    assert not out[3].any()  # a miss leaves no bytes of the failed read in the caller's buffer
    assert hashed.calls == 1
