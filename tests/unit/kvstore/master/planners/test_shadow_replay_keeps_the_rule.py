"""The adaptive eviction policy's shadows replay a batch of sampled references in one C++ call
(HashOrder.replay_shadow): the same hits, to the last bit of the decayed count, and the same keys in each
shadow and its ghost as the rule replayed one reference at a time (the model below: what
kvstore.master.planners.eviction._Shadow.reference did per key in Python)."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore._meta import HashOrder
from kvstore.master.planners.eviction import AdaptivePolicy, _Shadow


class ModelShadow:
    """One reference at a time: a hit moves the key last; a miss inserts it last (LRU), or first under
    bimodal insertion unless the ghost remembers it, and evicts the first keys past the capacity into the
    ghost, which keeps the last 4 x capacity."""

    def __init__(self, bimodal: bool) -> None:
        self.bimodal = bimodal
        self.order: OrderedDict[str, None] = OrderedDict()
        self.ghost: OrderedDict[str, None] = OrderedDict()
        self.hits = 0.0

    def reference(self, key: str, capacity: int, decay: float) -> None:
        self.hits *= decay
        if key in self.order:
            self.order.move_to_end(key)
            self.hits += 1
            return
        admitted = not self.bimodal or self.ghost.pop(key, 0) is None
        self.order[key] = None
        if not admitted:
            self.order.move_to_end(key, last=False)
        while len(self.order) > capacity:
            evicted, _ = self.order.popitem(last=False)
            self.ghost.pop(evicted, None)
            self.ghost[evicted] = None
            while len(self.ghost) > 4 * max(capacity, 1):
                self.ghost.popitem(last=False)


keys = st.integers(0, 40).map(lambda i: f"blk/{i}")
batches = st.lists(st.tuples(st.lists(keys, max_size=30), st.integers(1, 12)), max_size=12)


@settings(max_examples=200)
@given(st.booleans(), batches, st.sampled_from([1.0, 0.99997, 0.5, 0.9]))
def test_a_batch_replayed_in_cpp_is_the_rule_one_reference_at_a_time(
    bimodal: bool, steps: list[tuple[list[str], int]], decay: float
) -> None:
    shadow, model = _Shadow(bimodal, seed=7), ModelShadow(bimodal)
    for batch, capacity in steps:
        shadow.reference_many(batch, capacity, decay)
        for key in batch:
            model.reference(key, capacity, decay)
        assert shadow.hits == model.hits  # (bit for bit: the same products and sums in the same order)
        every = [f"blk/{i}" for i in range(41)]
        assert [k in shadow.order for k in every] == [k in model.order for k in every]
        assert [k in shadow.ghost for k in every] == [k in model.ghost for k in every]
        assert (len(shadow.order), len(shadow.ghost)) == (len(model.order), len(model.ghost))


def test_a_ghost_must_share_its_orders_seed() -> None:
    order = HashOrder(1)
    with pytest.raises(ValueError, match="same seed"):
        order.replay_shadow(HashOrder(2), ["a"], 4, False, 1.0, 0.0)
    with pytest.raises(ValueError, match="same seed"):
        order.replay_shadow(order, ["a"], 4, False, 1.0, 0.0)


def test_the_policy_tells_both_shadows_each_sampled_access() -> None:
    """A get batch's sampled keys reach both shadows: an access after they were all inserted is a hit in
    each (the insertion's replay put them there)."""
    policy = AdaptivePolicy(sample=1)
    stored = [f"k{i}" for i in range(100)]
    policy.on_insert_many(stored)
    lru, bip = policy._shadows
    before = (lru.hits, bip.hits)
    policy.on_access_many(stored[:10])
    assert lru.hits == pytest.approx(before[0] * 0.99997**10 + sum(0.99997**i for i in range(10)))
    assert bip.hits > before[1]
