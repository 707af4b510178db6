"""Values gathered from a paged KV cache (one piece per layer's tensor, far apart) are hashed a group at a
time, piece k of every value before piece k + 1 (csrc/common/xxh3.cpp, hash_interleaved): each value's
digest must still be XXH3-64 of its own pieces in order, whatever the mix of piece counts, lengths, empty
pieces, values of one piece and values whose pieces continue one another."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from transfer_engine import checksum

pytestmark = pytest.mark.skipif(not checksum.available(), reason="the C++ XXH3 is not loaded")

MEMORY = 4 << 20


def reference(memory: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, counts: np.ndarray) -> list[int]:
    out, at = [], 0
    for count in counts.tolist():
        digest = xxhash.xxh3_64()
        mine = zip(offsets[at : at + count].tolist(), lengths[at : at + count].tolist(), strict=True)
        for offset, length in mine:
            digest.update(memory[offset : offset + length].tobytes())
        out.append(digest.intdigest())
        at += count
    return out


def digests(memory: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, counts: np.ndarray) -> list[int]:
    base = int(memory.__array_interface__["data"][0])
    return checksum.xxh3_pieces(offsets.astype(np.uint64) + np.uint64(base), lengths, counts)


@pytest.mark.parametrize("seed", range(8))
def test_scattered_pieces_of_mixed_values(seed: int) -> None:
    """More values than one group (64), piece counts 0..40 (one piece, none), lengths 0..5000."""
    rng = np.random.default_rng(seed)
    memory = rng.integers(0, 256, MEMORY, dtype=np.uint8)
    counts = rng.integers(0, 41, 150).astype(np.uint64)
    total = int(counts.sum())
    lengths = rng.integers(0, 5001, total).astype(np.uint64)
    offsets = rng.integers(0, MEMORY - 5000, total)
    assert digests(memory, offsets, lengths, counts) == reference(memory, offsets, lengths, counts)


def test_a_paged_layout_with_values_whose_pieces_continue_one_another() -> None:
    """The layout the interleaving is for (value b, h: block b and head h of each of 8 layers), beside
    values made of adjacent pieces, which are hashed alone; both kinds in one group."""
    rng = np.random.default_rng(9)
    memory = rng.integers(0, 256, MEMORY, dtype=np.uint8)
    layers, values, piece = 8, 96, 2048  # (both kinds fit in MEMORY: 3 MiB)
    paged = np.array([[layer * values * piece + v * piece for layer in range(layers)] for v in range(values)])
    adjacent = (layers * values * piece + np.arange(values * layers) * piece).reshape(values, layers)
    offsets = np.stack([paged, adjacent], axis=1).reshape(-1)  # alternate: a paged value, then an adjacent
    lengths = np.full(offsets.size, piece, dtype=np.uint64)
    counts = np.full(2 * values, layers, dtype=np.uint64)
    assert digests(memory, offsets, lengths, counts) == reference(memory, offsets, lengths, counts)


def test_a_batch_split_over_threads_hashes_each_value_its_own_way() -> None:
    """Over 16 MiB: the values are split over threads, each thread interleaving its own share."""
    rng = np.random.default_rng(3)
    memory = rng.integers(0, 256, MEMORY, dtype=np.uint8)
    counts = np.full(1200, 4, dtype=np.uint64)
    offsets = rng.integers(0, MEMORY // 8192, 4800) * 8192
    lengths = np.full(4800, 8192, dtype=np.uint64)
    assert digests(memory, offsets, lengths, counts) == reference(memory, offsets, lengths, counts)
