"""SGLang page keys and HiCache v2 hit policies (kvstore.integrations.sglang_keys / sglang_hits): pure
parts of the SGLang backend, no SGLang needed."""

from __future__ import annotations

import pytest

from kvstore.blocks import group_of
from kvstore.errors import InvalidArgumentError, NotSupportedError
from kvstore.integrations.sglang_hits import PoolPresence, restorable
from kvstore.integrations.sglang_keys import PageKeys, RankShape

PAGE = "ab" * 32  # a SHA-256 page hash, as SGLang's get_hash_str gives


def test_a_page_is_one_group_per_pool_with_a_member_per_rank_shard() -> None:
    rank1 = PageKeys("ns", RankShape(tp_rank=1, tp_size=4), rank_replicated=False)
    (key,) = rank1.keys("swa", rank1.tag("swa", "page_first"), [PAGE])
    assert key == f"ns/swa.page_first/{PAGE}#1of4"
    assert group_of(key) == (f"ns/swa.page_first/{PAGE}", 1, 4)


def test_mla_pages_are_written_once_but_mamba_state_stays_per_rank() -> None:
    mla = PageKeys("ns", RankShape(tp_rank=1, tp_size=2), rank_replicated=True)
    assert mla.keys("kv", "kv.page_first", [PAGE]) == [f"ns/kv.page_first/{PAGE}#0of1"]
    assert mla.keys("mamba", "mamba.page_first", [PAGE]) == [f"ns/mamba.page_first/{PAGE}#1of2"]


def test_formats_that_order_bytes_differently_never_share_a_key() -> None:
    keys = PageKeys("ns", RankShape(pp_rank=1, pp_size=2, cp_rank=1, cp_size=2), rank_replicated=False)
    tags = {
        keys.tag("kv", "layer_first"),
        keys.tag("kv", "page_first"),
        keys.tag("kv", "page_first", "fp8"),
        keys.tag("kv", "page_first", flat=True),
    }
    assert len(tags) == 4 and all(t.startswith("kv.") and "pp1of2" in t for t in tags)
    assert keys.shard("kv") == (1, 2)  # context-parallel ranks hold disjoint slices: members of their own


@pytest.mark.parametrize("page", ["", "a/b", "a#0of1", None])
def test_page_hashes_that_could_alias_another_key_are_refused(page: object) -> None:
    keys = PageKeys("ns", RankShape(), rank_replicated=False)
    with pytest.raises(InvalidArgumentError):
        keys.keys("kv", "kv.page_first", [page])  # type: ignore[list-item]


def test_a_rank_outside_its_group_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        RankShape(tp_rank=2, tp_size=2)


def test_trailing_pools_leave_holes_that_all_pages_pools_do_not() -> None:
    mamba = PoolPresence("mamba", "trailing_pages", 1, [False, True, False, True])
    swa = PoolPresence("swa", "trailing_pages", 2, [True, True, True, True])
    assert restorable(4, [mamba, swa]) == ([2, 4], {"mamba": 4, "swa": 4})
    indexer = PoolPresence("indexer", "all_pages", 0, [True, True, False, True])
    assert restorable(4, [mamba, indexer]) == ([2], {"mamba": 4, "indexer": 2})
    assert restorable(4, [PoolPresence("swa", "trailing_pages", 2, [True, False, True, True])]) == (
        [1, 4],
        {"swa": 4},
    )
    assert restorable(0, [swa]) == ([], {})


def test_an_unknown_hit_policy_is_refused() -> None:
    with pytest.raises(NotSupportedError):
        restorable(2, [PoolPresence("c4", "block_groups", 0, [True, True])])
