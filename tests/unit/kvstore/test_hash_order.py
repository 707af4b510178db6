"""kvstore._meta.HashOrder (csrc/meta/hash_order), the eviction policies' shadows and ghosts: against an
OrderedDict model after random operations, through its index's growth and deletions."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore._meta import HashOrder

ops = st.lists(
    st.tuples(st.sampled_from(["add", "front", "touch", "discard", "pop"]), st.integers(0, 40)), max_size=300
)


@settings(max_examples=80, deadline=None)
@given(ops)
def test_it_keeps_the_order_a_model_keeps(operations: list[tuple[str, int]]) -> None:
    order, model = HashOrder(seed=9), OrderedDict[str, None]()
    popped: list[int] = []
    for op, n in operations:
        key = f"k{n}"
        if op in ("add", "front"):
            order.add(key, front=op == "front")
            model[key] = None
            model.move_to_end(key, last=op == "add")
        elif op == "touch":
            assert order.touch(key) == (key in model)
            if key in model:
                model.move_to_end(key)
        elif op == "discard":
            assert order.discard(key) == (model.pop(key, 0) is None)
        else:
            first = order.pop_first()
            assert (first is None) == (not model)
            if model:
                model.popitem(last=False)
                popped.append(first)
        assert len(order) == len(model) and all(k in order for k in model)
    # What is left comes out in the model's order; a hash popped goes back in by add_hash.
    ghost = HashOrder(seed=9)
    for h in popped:
        ghost.add_hash(h)
    while model:
        key, _ = model.popitem(last=False)
        h = order.pop_first()
        ghost.add_hash(h)
        assert key in ghost
    assert order.pop_first() is None and len(order) == 0


def test_many_keys_through_growth_and_removal() -> None:
    order = HashOrder()
    for i in range(100_000):
        order.add(f"key-{i}")
    for i in range(0, 100_000, 2):
        assert order.discard(f"key-{i}")
    assert len(order) == 50_000 and "key-1" in order and "key-0" not in order and 123 not in order
    assert order.memory_bytes < 100_000 * 40


def test_the_sample_is_the_keys_whose_crc32_divides_by_it() -> None:
    import zlib

    keys = [f"block/{i}" for i in range(2000)] + ["é/ключ", ""]
    assert HashOrder(3).sampled(keys, 8) == [k for k in keys if zlib.crc32(k.encode()) % 8 == 0]
