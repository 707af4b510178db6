"""XXH3 over memory pieces in C++: the very digests Python's xxhash gives, whatever the split."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash

from transfer_engine import InvalidArgumentError, _core, checksum


def test_the_xxhash_package_exports_what_the_cpp_side_needs() -> None:
    assert checksum.available(), "xxhash's extension no longer exports XXH3: checksums fall back to Python"


def test_copies_hash_as_they_copy_where_the_cpu_has_avx2() -> None:
    """The fused copy and hash is on wherever it can be: it enables itself only once it reproduces the
    library's digests at load, so off here means a regression (or a library without the default secret)."""
    with open("/proc/cpuinfo") as f:
        avx2 = " avx2" in f.read()
    if not avx2:
        pytest.skip("no AVX2 on this CPU: copies and hashes are two passes")
    assert checksum.available()
    assert _core.xxh3_fused()


@pytest.mark.parametrize("total", [1, 15, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 65_536, 1_000_003])
def test_digests_match_python_for_any_split(total: int) -> None:
    rng = np.random.default_rng(total)
    data = np.frombuffer(rng.bytes(total), dtype=np.uint8)
    cuts = sorted({0, total, *rng.integers(0, total, size=min(total, 6)).tolist()})
    sizes = np.diff(cuts)
    sizes = sizes[sizes > 0].tolist()
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    whole = checksum.xxh3_pieces([data.ctypes.data], [total], [1])
    split = checksum.xxh3_pieces((data.ctypes.data + starts).tolist(), sizes, [len(sizes)])
    assert whole == split == [xxhash.xxh3_64_intdigest(data.tobytes())]


def test_many_values_in_one_call_and_bad_counts() -> None:
    data = np.frombuffer(np.random.default_rng(1).bytes(3000), dtype=np.uint8)
    base = data.ctypes.data
    got = checksum.xxh3_pieces(
        [base, base + 100, base + 1000, base + 2000], [100, 400, 1000, 1000], [2, 1, 1]
    )
    want = [data[:500], data[1000:2000], data[2000:3000]]
    assert got == [xxhash.xxh3_64_intdigest(w.tobytes()) for w in want]
    with pytest.raises(InvalidArgumentError):
        checksum.xxh3_pieces([base], [10], [2])  # counts name more pieces than given


def test_a_large_batch_hashed_over_several_threads_gives_each_value_its_own_digest() -> None:
    """Past 16 MiB a batch is split over threads by bytes: values of uneven sizes (one larger than the
    rest together, many small ones, one of many pieces) keep their own digests, in order."""
    rng = np.random.default_rng(7)
    sizes = [20 << 20, 1, 241, 4096, *rng.integers(1, 1 << 20, size=40).tolist(), 3 << 20]
    data = np.frombuffer(rng.bytes(sum(sizes)), dtype=np.uint8)
    starts = np.r_[0, np.cumsum(sizes)[:-1]].tolist()
    addrs, lengths, counts = [], [], []
    for start, size in zip(starts, sizes, strict=True):
        cuts = [0, size] if size < 3 << 20 else [0, size // 3, size // 2, size]  # a value in pieces
        addrs += [data.ctypes.data + start + c for c in cuts[:-1]]
        lengths += np.diff(cuts).tolist()
        counts.append(len(cuts) - 1)
    got = checksum.xxh3_pieces(addrs, lengths, counts)
    want = [xxhash.xxh3_64_intdigest(data[s : s + n].tobytes()) for s, n in zip(starts, sizes, strict=True)]
    assert got == want
