"""Direct I/O on a disk file at queue depth, through both backends (io_uring and the thread pool)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import tiny_tmpfs
from transfer_engine import EngineClosedError, InvalidArgumentError
from transfer_engine.disk import DiskFile
from transfer_engine.errors import CODE_NAMES, StorageIOError

BACKENDS = ["io_uring", "threads"]
PAGE = 4096


def aligned(nbytes: int, seed: int | None = None) -> np.ndarray:
    """Page-aligned memory (its own mapping), random bytes when seeded."""
    out = np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8)
    if seed is not None:
        out[:] = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    return out


def names(codes: np.ndarray) -> list[str]:
    return [CODE_NAMES[int(c)] for c in codes]


@pytest.fixture(params=BACKENDS)
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DiskFile]:
    with DiskFile(str(tmp_path / "tier"), "8MiB", backend=request.param, depth=8) as f:
        assert f.backend == request.param and f.alignment == PAGE and f.size == 8 << 20
        yield f


def test_a_batch_deeper_than_the_queue_round_trips(disk: DiskFile) -> None:
    count = 40  # five times the queue depth
    source, target = aligned(count * 2 * PAGE, seed=1), aligned(count * 2 * PAGE)
    order = np.random.default_rng(2).permutation(count)  # scattered over the file
    offsets = [int(k) * 3 * 2 * PAGE for k in order]
    addrs = [source.ctypes.data + i * 2 * PAGE for i in range(count)]
    assert names(disk.run([True] * count, addrs, offsets, [2 * PAGE] * count)) == ["OK"] * count
    back = [target.ctypes.data + i * 2 * PAGE for i in range(count)]
    assert names(disk.run([False] * count, back, offsets, [2 * PAGE] * count)) == ["OK"] * count
    assert np.array_equal(source, target)


def test_bad_requests_fail_alone(disk: DiskFile) -> None:
    buf = aligned(4 * PAGE, seed=3)
    codes = disk.run(
        [True, True, True, True, True, False],
        [
            buf.ctypes.data + 1,
            buf.ctypes.data,
            buf.ctypes.data,
            buf.ctypes.data,
            buf.ctypes.data,
            buf.ctypes.data,
        ],
        [0, 100, 0, disk.size - PAGE, disk.size, PAGE],
        [PAGE, PAGE, PAGE + 1, 2 * PAGE, PAGE, PAGE],
    )
    assert names(codes) == ["INVALID_ARGUMENT"] * 3 + ["OUT_OF_RANGE"] * 2 + ["OK"]
    with pytest.raises(InvalidArgumentError, match="aligned"):
        disk.write(buf.ctypes.data + 8, 0, PAGE)


def test_bytes_survive_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "tier")
    data, back = aligned(PAGE, seed=4), aligned(PAGE)
    with DiskFile(path, "1MiB") as f:
        f.write(data.ctypes.data, 5 * PAGE, PAGE)
    with DiskFile(path, "2MiB") as f:  # grown, never truncated: what was written stays
        f.read(back.ctypes.data, 5 * PAGE, PAGE)
        assert f.size == 2 << 20
    assert np.array_equal(data, back) and os.path.getsize(path) == 2 << 20


def test_bad_settings_and_a_closed_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="backend"):
        DiskFile(str(tmp_path / "a"), "1MiB", backend="aio")
    with pytest.raises(InvalidArgumentError, match="depth"):
        DiskFile(str(tmp_path / "a"), "1MiB", depth=0)
    with pytest.raises(InvalidArgumentError, match="multiple of 4096"):
        DiskFile(str(tmp_path / "a"), 5000)
    with pytest.raises(InvalidArgumentError, match="neither a file"):
        DiskFile(str(tmp_path), "1MiB")  # a directory
    f = DiskFile(str(tmp_path / "b"), "1MiB")
    f.close()
    with pytest.raises(EngineClosedError):
        f.read(aligned(PAGE).ctypes.data, 0, PAGE)


def test_a_disk_too_small_for_the_tier_is_a_clear_error(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "small", "1M") as small:
        with pytest.raises(StorageIOError, match="No space left"):
            DiskFile(str(small / "tier"), "4MiB")
        assert not (small / "tier").exists() or (small / "tier").stat().st_size < 4 << 20


def test_a_read_only_open_reads_the_file_as_it_is_and_never_writes(tmp_path: Path) -> None:
    from transfer_engine.errors import PermissionDeniedError

    path = tmp_path / "tier"
    data = aligned(4 * PAGE, seed=9)
    with DiskFile(str(path), "1MiB") as writer:
        writer.write(data.ctypes.data, 8 * PAGE, 4 * PAGE)
    with DiskFile(str(path), 0, read_only=True) as reader:
        assert reader.read_only and reader.size == 1 << 20
        back = aligned(4 * PAGE)
        reader.read(back.ctypes.data, 8 * PAGE, 4 * PAGE)
        assert np.array_equal(back, data)
        with pytest.raises(PermissionDeniedError, match="read-only"):
            reader.write(back.ctypes.data, 0, PAGE)
        codes = reader.run([True, False], [back.ctypes.data] * 2, [0, 0], [PAGE, PAGE])
        assert names(codes) == ["PERMISSION_DENIED", "OK"]
    assert path.stat().st_size == 1 << 20  # nothing grown or created
    with pytest.raises(InvalidArgumentError, match="less than asked"):
        DiskFile(str(path), "2MiB", read_only=True)
    with pytest.raises(StorageIOError):
        DiskFile(str(tmp_path / "absent"), 0, read_only=True)
    assert not (tmp_path / "absent").exists()


def test_a_file_region_is_read_by_peers_over_tcp_and_never_written(tmp_path: Path) -> None:
    """Kind file: a peer reads any byte range (unaligned too: the server reads the aligned blocks around
    it with direct I/O) over TCP; writes are refused; a transport that does not serve files refuses at
    submit; and a read outside the file is refused before any I/O."""
    from transfer_engine import Op, PermissionDeniedError, TransferEngine
    from transfer_engine.errors import OutOfRangeError

    path = tmp_path / "tier"
    data = aligned(64 * PAGE, seed=5)
    with DiskFile(str(path), "1MiB") as writer:
        writer.write(data.ctypes.data, 0, data.nbytes)
    with TransferEngine() as target, TransferEngine(transport="tcp") as reader:
        region = target.register_file(str(path))
        assert region.kind == "file" and region.length == 1 << 20
        peer = reader.open_peer(target.name)
        assert peer.region(region.id).kind == "file"
        local = reader.allocate(64 * PAGE, export=False)
        assert local.array is not None
        for offset, length in [(0, PAGE), (123, 5000), (PAGE - 1, 40 * PAGE + 3), (0, 64 * PAGE)]:
            local.array[:] = 0
            reader.read(local.addr, peer, region.id, offset, length)
            assert np.array_equal(local.array[:length], data[offset : offset + length])
        with pytest.raises(PermissionDeniedError):
            reader.write(local.addr, peer, region.id, 0, PAGE)
        with pytest.raises(OutOfRangeError):
            reader.read(local.addr, peer, region.id, (1 << 20) - 100, PAGE)
        with TransferEngine(transport="shm") as same_host:
            shm_peer = same_host.open_peer(target.name)
            scratch = same_host.allocate(PAGE, export=False)
            handle = same_host.submit(Op.READ, [scratch.addr], shm_peer, region.id, [0], PAGE)
            handle.wait()
            assert names(handle.errors()) == ["NOT_SUPPORTED"]
    with open(path, "rb") as f:
        assert f.read(data.nbytes) == data.tobytes()  # never written through the region
