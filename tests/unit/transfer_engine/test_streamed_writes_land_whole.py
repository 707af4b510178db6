"""A same-host write of 64 KiB and more stores around the cache (csrc/common/copy_bytes: copy_streaming,
whole 32-byte lines of the destination streamed, the head and tail copied as usual): whatever the length
and the alignment of either side, and gathered from pieces of any length, every byte lands in another
process's memory, and not one byte beside the range written."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import TargetProcess, start_target, stop_target
from tests.helpers.target_process import pattern
from transfer_engine import Op, TransferEngine

SIZE = 8 << 20
# Around the 64 KiB line where writes start to stream, odd tails, and a put's 512 KiB value.
LENGTHS = [65535, 65536, 65537, 65536 + 31, 65536 + 33, 100_003, 512 << 10, (1 << 20) + 5]
OFFSETS = [0, 1, 17, 31, 32, 4096 + 7]


@pytest.fixture(scope="module")
def shm_target() -> Iterator[TargetProcess]:
    target = start_target(size=SIZE, transport="shm")
    yield target
    stop_target(target)


def untouched_around(target: TargetProcess, offset: int, length: int) -> bool:
    """The target's bytes just before and after [offset, offset + length) are its first pattern still
    (pattern(SIZE)[a:b] is pattern(b - a, seed=7a mod 251))."""
    before = max(0, offset - 256)
    after = min(SIZE, offset + length + 256)
    return target.check("shared", before, offset - before, 7 * before % 251) and target.check(
        "shared", offset + length, after - offset - length, 7 * (offset + length) % 251
    )


def test_single_buffer_writes_land_whole(shm_target: TargetProcess) -> None:
    with TransferEngine(transport="shm") as engine:
        peer = engine.open_peer(shm_target.name)
        local = engine.allocate(2 << 20)
        assert local.array is not None
        at = 1024  # the target's range: one per case, apart, so none overwrites another's neighbours
        for k, length in enumerate(LENGTHS):
            for source_shift in (0, 3):
                offset = at + OFFSETS[k % len(OFFSETS)]
                seed = (k * 13 + source_shift) % 251
                local.array[source_shift : source_shift + length] = pattern(length, seed)
                engine.write(local.addr + source_shift, peer, shm_target.shared_region, offset, length)
                assert shm_target.check("shared", offset, length, seed), (length, offset, source_shift)
                assert untouched_around(shm_target, offset, length), (length, offset, source_shift)
                at = offset + length + 4096


def test_gathered_pieces_land_whole(shm_target: TargetProcess) -> None:
    """A request of many pieces (a paged cache's blocks, odd lengths) streams each piece in turn."""
    with TransferEngine(transport="shm") as engine:
        peer = engine.open_peer(shm_target.name)
        local = engine.allocate(2 << 20)
        assert local.array is not None
        rng = np.random.default_rng(5)
        at = 4 << 20
        for case in range(6):
            lengths = rng.integers(1, 40_000, size=int(rng.integers(2, 12))).tolist()
            total = sum(lengths)
            offset = at + int(rng.integers(0, 64))
            seed = 100 + case
            whole = pattern(total, seed)
            # each piece at its own place in local memory, with gaps, in order
            addrs, cursor, done = [], 0, 0
            for n in lengths:
                cursor += int(rng.integers(0, 100))
                local.array[cursor : cursor + n] = whole[done : done + n]
                addrs.append(local.addr + cursor)
                cursor += n
                done += n
            handle = engine.submit(
                Op.WRITE,
                [0],
                peer,
                shm_target.shared_region,
                [offset],
                [total],
                pieces=([len(lengths)], addrs, lengths),
            )
            assert handle.wait()
            handle.raise_for_status()
            assert shm_target.check("shared", offset, total, seed), (case, lengths)
            assert untouched_around(shm_target, offset, total), case
            at = offset + total + 4096
