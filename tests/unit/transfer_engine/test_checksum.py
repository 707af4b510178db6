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
