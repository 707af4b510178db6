"""XXH3-64 over pieces of local memory, the store's object checksum, hashed in C++ without the GIL.

The C++ side calls the hash functions the xxhash package's own extension exports (no build dependency,
the same digests as xxhash.xxh3_64). Where that extension does not export them, `available()` is False
and xxh3_pieces hashes the same pieces in Python (slower, same digests).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence

import numpy as np
import xxhash

from transfer_engine import _core

log = logging.getLogger(__name__)


def _load() -> bool:
    try:
        from xxhash import _xxhash  # type: ignore[attr-defined]

        _core.xxh3_load(_xxhash.__file__)
    except Exception as exc:  # any failure leaves Python hashing in place
        log.debug("XXH3 not loaded for C++ hashing (%s): checksums are computed in Python", exc)
        return False
    # The digests must be Python's, byte for byte: check across XXH3's size classes before use.
    probe = np.frombuffer(np.random.default_rng(0).bytes(5000), dtype=np.uint8)
    for sizes in ([0], [16], [128], [240], [241], [5000], [7, 993], [1, 1, 1, 4991]):
        starts = np.r_[0, np.cumsum(sizes)[:-1]]
        addrs = (probe.ctypes.data + starts).astype(np.uint64)
        lengths = np.asarray(sizes, np.uint64)
        got = int(_core.xxh3_pieces(addrs, lengths, np.asarray([len(sizes)], np.uint64))[0])
        if got != xxhash.xxh3_64_intdigest(probe[: sum(sizes)].tobytes()):
            log.warning("C++ XXH3 disagrees with xxhash.xxh3_64: checksums are computed in Python")
            return False
    return True


def xxh3_pieces(
    addrs: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray, counts: Sequence[int]
) -> list[int]:
    """Per value, XXH3-64 of its pieces in order: value v is the next counts[v] (addr, length) pieces.
    The memory must be mapped for the duration of the call (the caller's registered buffers)."""
    if not available():
        return _python_pieces(np.asarray(addrs).tolist(), np.asarray(lengths).tolist(), list(counts))
    return xxh3_digests(addrs, lengths, counts).tolist()  # (a uint64 array's tolist gives Python ints)


def xxh3_digests(
    addrs: Sequence[int] | np.ndarray, lengths: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray
) -> np.ndarray:
    """xxh3_pieces' digests as a uint64 array, for callers that compute on them in numpy (no Python int a
    value). C++ only: call it where available()."""
    return _core.xxh3_pieces(
        np.asarray(addrs, dtype=np.uint64),
        np.asarray(lengths, dtype=np.uint64),
        np.asarray(counts, np.uint64),
    )


def xxh3_each(addrs: list[int], lengths: list[int]) -> list[int]:
    """XXH3-64 of each (addr, length) on its own."""
    return xxh3_pieces(addrs, lengths, [1] * len(addrs))


def _python_pieces(addrs: list[int], lengths: list[int], counts: list[int]) -> list[int]:
    out = []
    at = 0
    for count in counts:
        digest = xxhash.xxh3_64()
        for a, n in zip(addrs[at : at + count], lengths[at : at + count], strict=True):
            digest.update((ctypes.c_char * n).from_address(a))
        out.append(digest.intdigest())
        at += count
    return out


def available() -> bool:
    """True when the pieces are hashed in C++ (else in Python)."""
    return _AVAILABLE


_AVAILABLE = _load()
