"""The master's object table (csrc/meta/object_table, kvstore._meta.ObjectTable) against a model: keys,
fields, copies and both orders agree with plain Python containers after any sequence of operations, the
index keeps every key through its lazy growth, and stale references are refused."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvstore._meta import ObjectTable

EVICTION, PENDING = 0, 1


def keys_in(table: ObjectTable, order: int) -> list[str]:
    return [key for key, _ in table.walk(order, None, 1 << 30)]


def test_insert_find_erase_and_fields() -> None:
    t = ObjectTable(seed=7)
    ref = t.insert("a")
    assert ref is not None and t.insert("a") is None and t.find("a") == ref and t.find("b") is None
    t.set_size(ref, 1024)
    t.set_complete(ref, True)
    t.set_lease_until(ref, 12.5)
    t.set_base_replicas(ref, 3)
    assert (t.size(ref), t.complete(ref), t.lease_until(ref), t.base_replicas(ref)) == (1024, True, 12.5, 3)
    assert t.key(ref) == "a" and len(t) == 1
    t.erase(ref)
    assert t.find("a") is None and len(t) == 0 and not t.alive(ref)


def test_a_stale_reference_is_refused_even_when_its_row_is_reused() -> None:
    t = ObjectTable()
    old = t.insert("old")
    t.erase(old)
    new = t.insert("new")
    assert new & 0xFFFFFFFF == old & 0xFFFFFFFF  # the same row, another incarnation
    for call in (t.size, t.key, t.copies, t.erase):
        with pytest.raises(KeyError):
            call(old)
    assert t.key(new) == "new"


def test_copies_keep_their_order_and_drop_by_value() -> None:
    t = ObjectTable()
    ref = t.insert("k")
    for seg in (1, 2, 3):
        t.add_copy(ref, seg, seg * 100, seg, seg + 10)
    assert t.drop_copy(ref, 1, 100, 1, 11) and not t.drop_copy(ref, 1, 100, 1, 11)
    assert t.copies(ref) == [(2, 200, 2, 12), (3, 300, 3, 13)]
    assert t.drop_copy(ref, 3, 300, 3, 13) and t.copies(ref) == [(2, 200, 2, 12)]
    t.clear_copies(ref)
    assert t.copies(ref) == [] and t.copy_count(ref) == 0


def test_out_of_range_values_are_refused() -> None:
    t = ObjectTable()
    ref = t.insert("k")
    with pytest.raises(TypeError):
        t.set_base_replicas(ref, 300)
    with pytest.raises(TypeError):
        t.set_size(ref, -1)
    with pytest.raises(ValueError):
        t.push_back(2, ref)


def test_the_index_keeps_every_key_while_it_grows_and_shrinks() -> None:
    t = ObjectTable(seed=1)
    n = 50_000  # several doublings, each moved lazily over the inserts that follow
    refs = {f"key-{i}": t.insert(f"key-{i}") for i in range(n)}
    assert all(t.find(k) == r for k, r in refs.items())
    for i in range(0, n, 2):
        t.erase(refs.pop(f"key-{i}"))
    assert all(t.find(k) == r for k, r in refs.items())
    assert all(t.find(f"key-{i}") is None for i in range(0, n, 2))
    # Erased while the index was still moving them (tombstones), then put back, then the move finishes.
    refs.update({f"key-{i}": t.insert(f"key-{i}") for i in range(0, n, 2)})
    refs.update({f"more-{i}": t.insert(f"more-{i}") for i in range(n)})
    assert len(t) == len(refs) == 2 * n and None not in refs.values()
    assert all(t.find(k) == r for k, r in refs.items())
    assert t.complete_many(["key-1", "key-0", "nope"]) == [False, False, False]
    t.set_complete(refs["key-1"], True)
    assert t.complete_many(["key-1", "key-0"]) == [True, False]
    with pytest.raises(TypeError):
        t.complete_many(["key-1", 7])  # type: ignore[list-item]
    assert t.memory_bytes > 0


def test_walk_resumes_after_a_reference() -> None:
    t = ObjectTable()
    refs = [t.insert(k) for k in "abcde"]
    for r in refs:
        t.push_back(EVICTION, r)
    first = t.walk(EVICTION, None, 2)
    assert [k for k, _ in first] == ["a", "b"]
    assert [k for k, _ in t.walk(EVICTION, first[-1][1], 10)] == ["c", "d", "e"]


class TableModel(RuleBasedStateMachine):
    """Random operations on the table and on a model of it; they must agree throughout."""

    def __init__(self) -> None:
        super().__init__()
        self.t = ObjectTable(seed=3)
        self.refs: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.copies: dict[str, list[tuple[int, int, int, int]]] = {}
        self.orders: tuple[list[str], list[str]] = ([], [])

    keys = st.text(alphabet="abcdefgh\u00e9", min_size=0, max_size=6)

    @rule(key=keys, size=st.integers(0, 1 << 40))
    def insert(self, key: str, size: int) -> None:
        ref = self.t.insert(key)
        if key in self.refs:
            assert ref is None
            return
        assert ref is not None
        self.t.set_size(ref, size)
        self.refs[key], self.sizes[key], self.copies[key] = ref, size, []

    @precondition(lambda self: self.refs)
    @rule(data=st.data())
    def erase(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.refs)))
        self.t.erase(self.refs.pop(key))
        del self.sizes[key], self.copies[key]
        for order in self.orders:
            if key in order:
                order.remove(key)

    @precondition(lambda self: self.refs)
    @rule(data=st.data(), order=st.sampled_from([EVICTION, PENDING]), front=st.booleans())
    def push(self, data: st.DataObject, order: int, front: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.refs)))
        model = self.orders[order]
        if key in model:
            model.remove(key)
        model.insert(0, key) if front else model.append(key)
        (self.t.push_front if front else self.t.push_back)(order, self.refs[key])

    @precondition(lambda self: self.refs)
    @rule(data=st.data(), order=st.sampled_from([EVICTION, PENDING]))
    def unlink(self, data: st.DataObject, order: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.refs)))
        if key in self.orders[order]:
            self.orders[order].remove(key)
        self.t.unlink(order, self.refs[key])

    @precondition(lambda self: self.refs)
    @rule(data=st.data(), seg=st.integers(0, 3), drop=st.booleans())
    def copy(self, data: st.DataObject, seg: int, drop: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.refs)))
        copy = (seg, seg * 64, seg, 1)
        model = self.copies[key]
        if drop:
            assert self.t.drop_copy(self.refs[key], *copy) == (copy in model)
            if copy in model:
                model.remove(copy)
        else:
            self.t.add_copy(self.refs[key], *copy)
            model.append(copy)

    @invariant()
    def agrees(self) -> None:
        assert len(self.t) == len(self.refs)
        for key, ref in self.refs.items():
            assert self.t.find(key) == ref and self.t.key(ref) == key and self.t.size(ref) == self.sizes[key]
            assert self.t.copies(ref) == self.copies[key]
        for order, model in enumerate(self.orders):
            assert keys_in(self.t, order) == model and self.t.length(order) == len(model)
            for key in self.refs:
                assert self.t.linked(order, self.refs[key]) == (key in model)


TestTableModel = TableModel.TestCase
TestTableModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


def test_a_batch_lookup_encodes_the_reply_as_msgpack_python_would() -> None:
    """locate_many writes the get_replicas reply itself (csrc/meta/msgpack_writer.h): byte for byte what
    msgpack-python packs for the same records, across the integer, string and array widths."""
    import msgpack

    t = ObjectTable(seed=5)
    places = {1: (0, "h", "127.0.0.1:7000", 1), 2: (0, "h" * 40, "e" * 300, 70000)}
    expected: list[object] = []
    keys = []
    for i in range(40):  # > 15 keys: an array16 header
        key = f"k{i}"
        keys.append(key)
        if i % 7 == 3:
            expected.append(None)  # a miss
            continue
        ref = t.insert(key)
        size, checksum = 1 << (i % 64) if i % 64 else 127, (1 << 64) - 1 - i
        t.set_size(ref, size)
        t.set_checksum(ref, checksum)
        t.set_complete(ref, i % 11 != 5)  # a put in progress is a miss too
        copies = [(1 + c % 2, (1 << (c * 3)) + i, c * 300 + i, (1 << 63) + c) for c in range(i % 18 + 1)]
        for seg, offset, slot, gen in copies:
            t.add_copy(ref, seg, offset, slot, gen)
        where = [[*places[seg], offset, slot, gen, ""] for seg, offset, slot, gen in copies]
        expected.append([size, checksum, where] if i % 11 != 5 else None)
    reply, hits, notes, found = t.locate_many(keys, False, 10.0, 20.0, 60.0, 1e9, places, False)
    assert reply == msgpack.packb(expected) and found == len(hits)
    assert hits == [k for k, e in zip(keys, expected, strict=True) if e is not None]
    assert notes == []  # none to look at: not hot, not short of copies, not on a disk
    t.set_base_replicas(t.find("k0"), 30)  # short of copies: replication must look at it
    t.set_disk_segment(t.find("k1"), 4)
    _, _, notes, _ = t.locate_many(keys[:2], False, 10.0, 20.0, 60.0, 1e9, places, False)
    assert notes == [(0, "k0", True, 0, True), (1, "k1", True, 4, False)]
    # With `prefix`, every key after the first miss is nil, and not a use.
    reply, hits, _, _ = t.locate_many(keys, True, 10.0, 20.0, 60.0, 1e9, places, False)
    assert msgpack.unpackb(reply) == expected[:3] + [None] * 37 and hits == keys[:3]


def test_batch_entry_points_are_all_or_nothing_and_agree_with_single_calls() -> None:
    t = ObjectTable(seed=11)
    rec = [(i * 64, i, 100 + i, f"r{i}", 64, i, i % 2 == 0, 9) for i in range(5)]
    assert t.adopt_many(3, rec, 7, 1.5, 4) == 5 * 64  # the bytes added
    ref = t.find("r2")
    assert ref is not None and t.copies(ref) == [(3, 128, 2, 102)]
    assert (t.complete(ref), t.pinned(ref), t.base_replicas(ref), t.writer(ref)) == (True, True, 4, 7)
    with pytest.raises(ValueError):  # r0 is present: nothing of the batch is added
        t.adopt_many(3, [(0, 9, 1, "new", 64, 1, False, 1), rec[0]], 7, 1.5, 4)
    with pytest.raises(ValueError):  # a key twice in one batch
        t.adopt_many(3, [(0, 9, 1, "x", 64, 1, False, 1), (64, 10, 1, "x", 64, 1, False, 1)], 7, 1.5, 4)
    assert t.find("new") is None and t.find("x") is None and len(t) == 5
    assert t.first_present(["a", "b", "r3", "r1"]) == 2 and t.first_present(["a"]) == 1
    assert t.in_memory(["r0", "nope", "r4"]) == ["r0", "r4"]
    # Copies on a lost segment: dropped; objects left with nothing, or on a disk only, named apart.
    t.add_copy(t.find("r1"), 8, 0, 0, 1)
    t.set_disk_segment(t.find("r3"), 2)
    dropped, bare, disk_only = t.drop_copies_on(3, ["r0", "r1", "r3", "gone"], True)
    assert sorted(dropped) == [("r0", 0, 0, 100), ("r1", 64, 1, 101), ("r3", 192, 3, 103)]
    assert (bare, disk_only) == (["r0"], ["r3"]) and t.copies(t.find("r1")) == [(8, 0, 0, 1)]
    assert t.drop_copies_on(3, ["r0", "r2"], False) == ([], ["r2"], [])  # (r0's went already; untold)
    # Orders: added and removed in batches as one at a time; erase_many's bytes are the committed ones'.
    t.order_add_many(EVICTION, ["r4", "r2", "r0"], False)
    assert keys_in(t, EVICTION) == ["r4", "r2", "r0"]
    assert t.order_remove_many(EVICTION, ["r2", "r1", "r2"]) == ["r2"] and keys_in(t, EVICTION) == [
        "r4",
        "r0",
    ]
    with pytest.raises(KeyError):
        t.order_add_many(EVICTION, ["r1", "absent"], False)
    assert keys_in(t, EVICTION) == ["r4", "r0"]  # (nothing linked: all or nothing)
    assert t.erase_many(["r0", "r4", "absent"]) == 128 and len(t) == 3 and keys_in(t, EVICTION) == []
    assert t.short_of_copies(["r1", "r2", "absent"]) == ["r1", "r2"]  # base 4, one copy each
