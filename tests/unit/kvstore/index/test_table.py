"""The prefix index: longest runs per instance, medium and rank; removal, clearing and the block bound."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.index.table import Holder, PrefixIndex, Scope, medium_name

S = Scope("m", 16)


def test_longest_prefix_per_instance_medium_and_rank() -> None:
    index = PrefixIndex()
    index.store(S, Holder("a", "GPU", 0), [1, 2, 3])
    index.store(S, Holder("a", "CPU", 1), [1, 2, 3, 4, 5])
    index.store(S, Holder("b", "GPU", 0), [1, 2])
    index.store(S, Holder("c", "GPU", 0), [2, 3, 4])  # (not from the start: no match)
    m = index.match(S, [1, 2, 3, 4, 5, 6])
    assert set(m) == {"a", "b"}
    assert (m["a"].longest, m["a"].media, m["a"].ranks) == (5, {"GPU": 3, "CPU": 5}, {0: 3, 1: 5})
    assert (m["b"].longest, m["b"].media, m["b"].ranks) == (2, {"GPU": 2}, {0: 2})
    only_b = index.match(S, [1, 2, 3], instance_id="b")
    assert set(only_b) == {"b"} and only_b["b"].longest == 2
    assert index.match(S, [1, 2], instance_id="nobody") == {}
    assert index.match(Scope("m", 32), [1, 2]) == {}  # another block size is another scope
    assert index.match(S._replace(lora_name="x"), [1]) == {}


def test_a_run_spans_media_for_the_instance_but_not_for_each_medium() -> None:
    index = PrefixIndex()
    index.store(S, Holder("a", "GPU", 0), [1])
    index.store(S, Holder("a", "CPU", 0), [2])
    m = index.match(S, [1, 2])["a"]
    assert (m.longest, m.media, m.ranks) == (2, {"GPU": 1}, {0: 2})


def test_removal_clearing_and_unregistering_give_the_bits_back() -> None:
    index = PrefixIndex()
    index.store(S, Holder("a", "GPU", 0), [1, 2, 3])
    index.store(S, Holder("a", "CPU", 0), [1, 2, 3])
    index.remove(S, Holder("a", "GPU", 0), [2])
    m = index.match(S, [1, 2, 3])["a"]
    assert (m.longest, m.media) == (3, {"GPU": 1, "CPU": 3})
    index.clear("a", medium="CPU")
    assert index.match(S, [1, 2, 3])["a"].longest == 1
    index.clear("a")
    assert index.match(S, [1]) == {} and index.entries == 0 and list(index.scopes()) == []


def test_the_block_bound_refuses_new_blocks_and_counts_them() -> None:
    index = PrefixIndex(max_blocks=3)
    index.store(S, Holder("a", "GPU", 0), [1, 2, 3, 4, 5])
    index.store(S, Holder("b", "GPU", 0), [1, 2])  # (known blocks: not new entries)
    assert index.entries == 3 and index.refused == 2
    assert index.match(S, [1, 2, 3, 4])["a"].longest == 3 and index.match(S, [1, 2])["b"].longest == 2


def test_medium_names_follow_every_publishers_spelling() -> None:
    assert [medium_name(m) for m in (None, "GPU", "gpu", "cpu", "STORAGE", "disk", "G3", "cxl")] == [
        "GPU", "GPU", "GPU", "CPU", "DISK", "DISK", "DISK", "CXL",
    ]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3), st.sampled_from(["GPU", "CPU"]),
                          st.integers(0, 1), st.lists(st.integers(0, 7), max_size=6)), max_size=40),
       st.lists(st.integers(0, 7), min_size=1, max_size=8))  # fmt: skip
def test_matches_agree_with_a_plain_model(ops: list, query: list[int]) -> None:
    """Random stores and removals: every match equals the one computed from sets by brute force."""
    index = PrefixIndex()
    held: dict[Holder, set[int]] = {}
    for store, inst, medium, rank, hashes in ops:
        h = Holder(f"i{inst}", medium, rank)
        if store:
            index.store(S, h, hashes)
            held.setdefault(h, set()).update(hashes)
        else:
            index.remove(S, h, hashes)
            held.get(h, set()).difference_update(hashes)

    def run(sets: list[set[int]]) -> int:
        n = 0
        while n < len(query) and any(query[n] in b for b in sets):
            n += 1
        return n

    got = index.match(S, query)
    for inst in {h.instance_id for h in held}:
        mine = {h: b for h, b in held.items() if h.instance_id == inst}
        longest = run(list(mine.values()))
        if not longest:
            assert inst not in got
            continue
        assert got[inst].longest == longest
        for medium in ("GPU", "CPU"):
            n = run([b for h, b in mine.items() if h.medium == medium])
            assert got[inst].media.get(medium, 0) == n
        for rank in (0, 1):
            n = run([b for h, b in mine.items() if h.dp_rank == rank])
            assert got[inst].ranks.get(rank, 0) == n
    assert index.entries == len(set().union(*held.values()))
