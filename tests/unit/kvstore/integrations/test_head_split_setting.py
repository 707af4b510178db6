"""The vLLM connector's head_split setting (StoreConfig.head_split, connector key head_split, else
KVSTORE_HEAD_SPLIT): validated, falls back to the environment, and the HeadSplit it plans reads whole
members at every TP size that divides it and refuses the others (the engines tier's test_vllm_tp runs it
through vLLM's real connector)."""

from __future__ import annotations

import pytest

from kvstore.config import StoreConfig
from kvstore.errors import InvalidArgumentError, NotSupportedError
from kvstore.integrations.head_layout import HeadSplit
from kvstore.integrations.paged import CONNECTOR_SETTINGS, store_settings


def test_the_split_is_a_connector_setting_with_an_environment_fallback() -> None:
    assert "head_split" in CONNECTOR_SETTINGS
    assert StoreConfig.load({}).head_split == 0  # one member per KV head unless asked
    assert StoreConfig.load({"KVSTORE_HEAD_SPLIT": "2"}).head_split == 2
    extra = store_settings({"head_split": 1})  # the connector's extra config wins over the variable
    assert StoreConfig.load({"KVSTORE_HEAD_SPLIT": "2"}, **extra).head_split == 1
    assert StoreConfig.load({"KVSTORE_HEAD_SPLIT": "2"}, **store_settings({"head_split": ""})).head_split == 2


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_a_split_that_is_not_a_count_is_refused_with_a_clear_error(bad: str) -> None:
    with pytest.raises(InvalidArgumentError, match="head_split"):
        StoreConfig.load({"KVSTORE_HEAD_SPLIT": bad}).validate()


def test_every_tp_size_that_divides_the_split_reads_whole_members_of_it() -> None:
    """Llama-3-8B's 8 KV heads under head_split=2: 2 members of 4 heads; TP=1 reads both, each TP=2 rank
    one, and each writes what it reads."""
    one = HeadSplit.plan(8, 0, 1, 2)
    assert (one.count, one.heads_per_member, list(one.members), one.writes) == (2, 4, [0, 1], True)
    for rank in range(2):
        half = HeadSplit.plan(8, rank, 2, 2)
        assert list(half.members) == [rank] and half.writes
    only = HeadSplit.plan(8, 0, 1, 1)  # a TP=1-only deployment: one object per block and group
    assert only.count == 1 and only.heads_per_member == 8 and list(only.members) == [0]


@pytest.mark.parametrize(("heads", "split", "tp"), [(8, 2, 4), (8, 1, 2), (4, 2, 8), (2, 1, 4)])
def test_a_split_a_tp_size_would_read_in_parts_is_refused(heads: int, split: int, tp: int) -> None:
    for rank in range(tp):
        with pytest.raises(NotSupportedError):
            HeadSplit.plan(heads, rank, tp, split)


@pytest.mark.parametrize("split", [3, 5, 16])
def test_a_split_that_does_not_divide_the_kv_heads_is_refused(split: int) -> None:
    with pytest.raises(InvalidArgumentError, match=f"head split {split} does not divide 8 KV heads"):
        HeadSplit.plan(8, 0, 1, split)
