"""RangeTable.tags: pieces resolved to the tag of the registration holding each, the same whether a few
are looked up one by one or many as arrays; None when any piece is not wholly inside one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.client.ranges import RangeTable

_REGIONS = [(1000, 500, 7), (1500, 100, 8), (4000, 1 << 20, 9)]


def _table() -> RangeTable:
    table = RangeTable()
    for start, length, tag in _REGIONS:
        table.add(start, length, payload=None, tag=tag)
    return table


def _expected(addrs: list[int], lengths: list[int]) -> list[int] | None:
    out = []
    for a, n in zip(addrs, lengths, strict=True):
        hit = [t for s, length, t in _REGIONS if s <= a and a + n <= s + length]
        if n <= 0 or not hit:
            return None
        out.append(hit[0])
    return out


pieces = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 6000), st.integers(4000, 4000 + (1 << 20)), st.just((1 << 63) + 4000)),
        st.integers(-2, 1 << 20),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(pieces)
def test_few_and_many_pieces_resolve_alike(found: list[tuple[int, int]]) -> None:
    table = _table()
    addrs = [a for a, _ in found]
    lengths = [n for _, n in found]
    want = _expected(addrs, lengths)
    for a, n in ((addrs, lengths), (addrs * 3, lengths * 3)):  # one by one (few) and as arrays (many)
        got = table.tags(a, n)
        assert (got is None) == (want is None)
        if want is not None and got is not None:
            assert got.tolist() == want * (len(a) // len(addrs))


def test_a_piece_past_a_registration_or_between_two_has_no_tag() -> None:
    table = _table()
    assert table.tags([1000], [500]).tolist() == [7]  # type: ignore[union-attr]
    assert table.tags([1400], [200]) is None  # spans two registrations
    assert table.tags([999], [1]) is None
    assert table.tags([1000], [0]) is None
    assert table.tags([1 << 63], [4096]) is None  # (no user-space address)
    assert table.tags([True], [1]) is None  # not an int


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 1 << 13), st.integers(0, 80)), min_size=5, max_size=200),
)
def test_many_pieces_over_many_registrations_resolve_as_one_by_one(
    layout: list[tuple[int, int]], found: list[tuple[int, int]]
) -> None:
    """The array lookup (the engine's range_tags: the previous piece's registration and its neighbours
    first, then a binary search) gives each piece the registration a scan finds, in any order of pieces,
    as numpy arrays too; a piece past a registration's end (above it, not only across it) has none."""
    table, regions, at = RangeTable(), [], 0
    for tag, (gap, length) in enumerate(layout):
        at += gap
        regions.append((at, length, tag))
        table.add(at, length, payload=None, tag=tag)
        at += length
    addrs = [a for a, _ in found]
    lengths = [n for _, n in found]
    want = []
    for a, n in found:
        hit = [t for s, length, t in regions if s <= a and a + n <= s + length]
        want.append(hit[0] if n > 0 and hit else None)
    for a_col, n_col in ((addrs, lengths), (np.array(addrs, np.uint64), np.array(lengths, np.uint64))):
        got = table.tags(a_col, n_col)
        if None in want:
            assert got is None
        else:
            assert got is not None and got.tolist() == want
    inside = [(a, n) for (a, n), w in zip(found, want, strict=True) if w is not None]
    if inside:  # the pieces that are inside, alone: every one resolves
        got = table.tags(
            np.array([a for a, _ in inside], np.uint64), np.array([n for _, n in inside], np.uint64)
        )
        assert got is not None and got.tolist() == [w for w in want if w is not None]
