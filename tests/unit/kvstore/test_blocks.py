from __future__ import annotations

import numpy as np
import pytest
import xxhash

from kvstore.blocks import BlockHasher
from kvstore.errors import InvalidArgumentError

# Fixed inputs -> fixed keys: these must never change (they name data already stored by users).
FROZEN_NS = ["eeb7dde3597f35f3f5b50814456f5041", "17275e3856855e2dff59e1e7c123fb08"]
FROZEN_EMPTY = ["ab1dc4eee11a459d393fdc4c0668cf07"]


def test_definition() -> None:
    tokens = [5, 6, 7, 8, 9, 10, 11, 12, 13]
    keys = BlockHasher(4, "llama-3-8b/tp0").keys(tokens)
    assert len(keys) == 2  # the partial trailing block gets no key
    b0 = np.array([5, 6, 7, 8], "<u4").tobytes()
    b1 = np.array([9, 10, 11, 12], "<u4").tobytes()
    h0 = xxhash.xxh3_128(bytes(16) + b0 + b"llama-3-8b/tp0").digest()
    h1 = xxhash.xxh3_128(h0 + b1 + b"llama-3-8b/tp0").digest()
    assert keys == [h0.hex(), h1.hex()]


def test_fixed_vectors() -> None:
    h = BlockHasher(2, "ns")
    assert h.keys([1, 2, 3, 4]) == [
        xxhash.xxh3_128(bytes(16) + b"\x01\x00\x00\x00\x02\x00\x00\x00ns").hexdigest(),
        xxhash.xxh3_128(
            xxhash.xxh3_128(bytes(16) + b"\x01\x00\x00\x00\x02\x00\x00\x00ns").digest()
            + b"\x03\x00\x00\x00\x04\x00\x00\x00ns"
        ).hexdigest(),
    ]
    # Frozen literal values: a change of encoding would silently orphan every stored block.
    assert BlockHasher(2, "ns").keys([1, 2, 3, 4]) == FROZEN_NS
    assert BlockHasher(3).keys([0, 1, 2]) == FROZEN_EMPTY


def test_prefix_property() -> None:
    h = BlockHasher(16, "m")
    a = h.keys(np.arange(64))
    b = h.keys(np.r_[np.arange(48), np.arange(100, 116)])
    assert a[:3] == b[:3] and a[3] != b[3]
    c = h.keys(np.r_[np.arange(16) + 1, np.arange(16, 64)])  # first block differs: every key differs
    assert not set(a) & set(c)
    assert BlockHasher(16, "other").keys(np.arange(64))[0] != a[0]


def test_types_and_validation() -> None:
    h = BlockHasher(2)
    assert h.keys([]) == [] and h.keys([1]) == []
    assert h.keys(np.array([1, 2], dtype=np.int64)) == h.keys([1, 2]) == h.keys((1, 2))
    for bad in ([-1, 2], [2**32, 1], [1.5, 2.0], [[1, 2]]):
        with pytest.raises(InvalidArgumentError):
            h.keys(bad)
    with pytest.raises(InvalidArgumentError):
        BlockHasher(0)


def test_engine_ids() -> None:
    h = BlockHasher(16, "m")
    keys = h.keys_from_ids([1, 2**100, -5, b"\x00\x01"])
    assert len(set(keys)) == 4 and all(len(k) == 32 for k in keys)
    assert keys == h.keys_from_ids([1, 2**100, -5, b"\x00\x01"])
    assert BlockHasher(16, "n").keys_from_ids([1]) != keys[:1]
    with pytest.raises(InvalidArgumentError):
        h.keys_from_ids([1.0])  # type: ignore[list-item]


def test_group_member_keys_round_trip_and_reject_what_is_not_one() -> None:
    from kvstore.blocks import MAX_GROUP_MEMBERS, group_keys, group_of, member_key

    assert member_key("ns/abc", 2, 8) == "ns/abc#2of8"
    assert group_keys("g", 3) == ["g#0of3", "g#1of3", "g#2of3"]
    assert group_of("ns/abc#2of8") == ("ns/abc", 2, 8)
    assert group_of("a#b#0of1") == ("a#b", 0, 1)
    for plain in ("abc", "#0of1", "g#1of1", "g#01of2", "g#0of0", f"g#0of{MAX_GROUP_MEMBERS + 1}", "g#0of2x"):
        assert group_of(plain) is None, plain
    for bad in (("", 0, 1), ("g", 1, 1), ("g", -1, 2), ("g", 0, MAX_GROUP_MEMBERS + 1)):
        with pytest.raises(InvalidArgumentError):
            member_key(*bad)


def test_sequence_hash_keys_name_their_namespace_and_hash() -> None:
    from kvstore.blocks import member_key, seq_key, seq_of

    key = seq_key("vllm:m/x", 2**64 - 1)
    assert key == "vllm:m/x/0xffffffffffffffff"
    assert seq_of(key) == ("vllm:m/x", 2**64 - 1)
    assert seq_of(member_key(seq_key("ns", 5), 1, 4)) == ("ns", 5)
    assert seq_of(seq_key("ns", 7, "ab" * 16)) == ("ns", 7) and seq_key("ns", 7, "ab" * 16).endswith(
        "." + "ab" * 16
    )
    with pytest.raises(InvalidArgumentError):
        seq_key("ns", 7, "AB" * 16)
    assert seq_of("ns/0x05") is None and seq_of("0x0000000000000005") is None and seq_of("ns/abc") is None
    for bad in (-1, 2**64, True, 1.0):
        with pytest.raises(InvalidArgumentError):
            seq_key("ns", bad)  # type: ignore[arg-type]


def test_member_keys_are_member_key_of_each_index() -> None:
    from kvstore.blocks import member_key, member_keys

    assert member_keys("g", [2, 0, 3], 4) == [member_key("g", i, 4) for i in (2, 0, 3)]
    for bad in (("g", [4], 4), ("g", [-1], 4), ("", [0], 1), ("g", [0], 0)):
        with pytest.raises(InvalidArgumentError):
            member_keys(*bad)
