"""RangeTable.tags: pieces resolved to the tag of the registration holding each, the same whether a few
are looked up one by one or many as arrays; None when any piece is not wholly inside one."""

from __future__ import annotations

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
