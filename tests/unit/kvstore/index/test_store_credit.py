"""Blocks held by the store count for every instance of the model (issue 40, item 3): the master's events
name a seq-keyed block once per group with its hash and namespace, the index takes a store's publisher's
blocks of its namespace as shared, and an instance's longest match is the longest prefix where each block
is on it or in the store."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.blocks import group_keys, member_key, seq_hashes, seq_key
from kvstore.errors import ProtocolError
from kvstore.index.events import Translator, decode_frames
from kvstore.index.table import Holder, PrefixIndex, Scope
from kvstore.master.wire.kv_events import KeyEvent, removed_events, stored_events

S = Scope("m", 4)
DIGEST = "ab" * 16


def frames(events: list, seq: int = 0) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big"), msgpack.packb([1.0, events, 0])]


def event(kind: str, hashes: list[int], namespace: str | None, medium: str = "cpu") -> dict:
    e = {"event_type": kind, "seq_hashes": hashes, "medium": medium, "object_key": "k"}
    if namespace is not None:
        e["namespace"] = namespace
    return e


# -- the master: what a key's event says ------------------------------------------------------------


def test_plain_keys_keep_todays_events_and_lone_blocks_carry_hash_and_namespace() -> None:
    block = seq_key("llama/kv0", 0xABC, DIGEST)
    assert stored_events(["12", "0x1F", "not-a-hash", block], lambda g, n: True) == [
        KeyEvent("12", 12),
        KeyEvent("0x1F", 31),
        KeyEvent("not-a-hash", None),
        KeyEvent(block, 0xABC, "llama/kv0"),
    ]
    assert removed_events([block, "7"]) == [KeyEvent(block, 0xABC, "llama/kv0"), KeyEvent("7", 7)]
    # A member of a group that is not a block is a plain key, as before.
    assert stored_events(["x#0of2"], lambda g, n: True) == [KeyEvent("x#0of2", None)]


def test_a_group_is_one_event_named_by_member_0_while_it_is_shown() -> None:
    group = seq_key("ns", 5, DIGEST)
    members = group_keys(group, 3)
    first = KeyEvent(member_key(group, 0, 3), 5, "ns")
    shown: set[tuple[str, int]] = set()
    is_shown = lambda g, n: (g, n) in shown  # noqa: E731
    # Committed, or a copy landing, while the group misses a member: nothing.
    assert stored_events(members, is_shown) == []
    # Shown (GroupsShown names every member): one event; a copy of member 0 is its medium's event, another
    # member's copy says nothing.
    shown.add((group, 3))
    assert stored_events(members, is_shown) == [first]
    assert stored_events(members[1:], is_shown) == []
    # Hidden (GroupsHidden names every member) or member 0's copy gone: one event; another member's copy
    # going says nothing (the group hides when a member goes).
    assert removed_events(members) == [first]
    assert removed_events(members[2:]) == []
    big = seq_key("ns", 2**64 - 1)
    assert removed_events([member_key(big, 0, 1024)]) == [KeyEvent(member_key(big, 0, 1024), 2**64 - 1, "ns")]


# -- the index: a store's events and the match rule -------------------------------------------------


def test_the_namespace_travels_and_is_checked() -> None:
    batch = decode_frames(frames([event("stored", [1], "ns"), event("removed", [1], "ns")]))
    assert [e.namespace for e in batch.events] == ["ns", "ns"]  # type: ignore[union-attr]
    assert decode_frames(frames([event("stored", [1], None)])).events[0].namespace is None  # type: ignore[union-attr]
    with pytest.raises(ProtocolError, match="namespace"):
        decode_frames(frames([event("stored", [1], 7)]))  # type: ignore[arg-type]


def test_a_store_credits_its_namespace_to_every_instance_and_skips_the_rest() -> None:
    index = PrefixIndex()
    store = Translator(index, S, "store", 0, 1337, namespace="ns")
    hashes = seq_hashes(list(range(16)), 4)
    mixed = [event("stored", hashes[:3], "ns"), event("stored", [hashes[3]], "other"),
             event("stored", [hashes[3]], None)]  # fmt: skip
    store.apply(decode_frames(frames(mixed)))
    assert (store.counts.stored, store.counts.skipped) == (3, 2)
    assert index.match_all(S, hashes).store == 3
    # The store is no instance: an instance that never held anything is credited by the query's reader.
    assert index.match_all(S, hashes).instances == {}
    # Disk and memory copies are the store's two media: the block is the store's while either holds it.
    store.apply(decode_frames(frames([event("stored", [hashes[1]], "ns", "disk")], 1)))
    store.apply(decode_frames(frames([event("removed", [hashes[1]], "ns", "cpu")], 2)))
    assert index.match_all(S, hashes).store == 3
    store.apply(decode_frames(frames([event("removed", [hashes[1]], "ns", "disk")], 3)))
    assert index.match_all(S, hashes).store == 1
    # A publisher that starts again (or is unregistered) forgets every block it credited.
    index.clear("store", 0)
    assert index.match_all(S, hashes).store == 0 and index.entries == 0 and list(index.scopes()) == []


def test_a_store_registered_without_namespace_stays_an_instance_of_plain_keys() -> None:
    index = PrefixIndex()
    store = Translator(index, S, "store", 0, 1337)
    store.apply(decode_frames(frames([event("stored", [1, 2], None), event("stored", [3], "ns")])))
    assert index.match(S, [1, 2, 3])["store"].longest == 2 and store.counts.skipped == 1
    assert index.match_all(S, [1, 2, 3]).store == 0


def test_an_instances_run_is_its_blocks_or_the_stores() -> None:
    index = PrefixIndex()
    index.store(S, Holder("a", "GPU", 0), [1, 2, 4])
    index.store(S, Holder("b", "GPU", 1), [5])
    index.store_shared(S, Holder("store", "CPU", 0), [3, 4, 5])
    # a: 1, 2 its own, 3 the store's, 4 both, 5 the store's; its GPU run stays its own.
    m = index.match_all(S, [1, 2, 3, 4, 5, 6])
    assert m.store == 0 and set(m.instances) == {"a"}
    a = m.instances["a"]
    assert (a.longest, a.media, a.ranks) == (5, {"GPU": 2}, {0: 2})
    # From where the store holds the first block, every instance runs with it.
    m = index.match_all(S, [3, 4, 5, 6])
    assert m.store == 3 and {i: x.longest for i, x in m.instances.items()} == {"a": 3, "b": 3}
    assert (m.instances["a"].media, m.instances["b"].media) == ({}, {})  # (nothing of their own first)
    only_b = index.match_all(S, [3, 4, 5], instance_id="b")
    assert set(only_b.instances) == {"b"} and only_b.store == 3
    assert index.match_all(S, [3], instance_id="nobody") == (({}, 1))
    index.remove_shared(S, Holder("store", "CPU", 0), [4])
    assert index.match_all(S, [1, 2, 3, 4, 5]).instances["a"].longest == 5  # (4 is a's own)
    assert index.match_all(S, [3, 4, 5]).store == 1


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["store", "i0", "i1"]), st.booleans(),
                          st.lists(st.integers(0, 4), max_size=5)), max_size=30),
       st.lists(st.integers(0, 4), min_size=1, max_size=6))  # fmt: skip
def test_matches_with_a_store_agree_with_a_plain_model(ops: list, query: list[int]) -> None:
    """Random stores and removals by instances and the store: each instance's longest run is the
    longest prefix whose every block is its own or the store's."""
    index = PrefixIndex()
    held: dict[str, set[int]] = {"store": set(), "i0": set(), "i1": set()}
    for who, add, hashes in ops:
        holder = Holder(who, "CPU" if who == "store" else "GPU", 0)
        if who == "store":
            (index.store_shared if add else index.remove_shared)(S, holder, hashes)
        else:
            (index.store if add else index.remove)(S, holder, hashes)
        (held[who].update if add else held[who].difference_update)(hashes)

    def run(blocks: set[int]) -> int:
        n = 0
        while n < len(query) and query[n] in blocks:
            n += 1
        return n

    got = index.match_all(S, query)
    assert got.store == run(held["store"])
    for inst in ("i0", "i1"):
        longest = max(got.instances[inst].longest if inst in got.instances else 0, got.store)
        assert longest == run(held[inst] | held["store"])
        assert (got.instances[inst].media.get("GPU", 0) if inst in got.instances else 0) == run(held[inst])
    assert index.entries == len(held["store"]) + len(held["i0"] | held["i1"])
