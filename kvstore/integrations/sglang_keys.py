"""Store keys of SGLang HiCache pages (issue 40's block key scheme, as SGLang's page hashes allow).

SGLang names a page by a SHA-256 chain over its prefix's token ids (`get_hash_str`); the backend sees only
those strings, never the tokens, so the contract's 64-bit sequence hash cannot be computed here and the
page hash itself is the group identity under the namespace:

    <namespace>/<pool tag>/<page hash>#<shard>of<shards>

One store group per (pool, page): the pools of a page are written by separate calls (SGLang writes its
SWA / Mamba sidecars through v2 before the KV pool through v1) and a trailing-window pool holds only some
pages, so a group spanning pools could never complete. The members are the page's shards of that pool:
one per TP rank (and attention-CP rank) for rank-sharded pools (MHA heads, Mamba state), one for
rank-replicated pools (MLA, written once per DCP shard). The master shows a member only while its whole
group is stored, so a page counts for a rank only when every rank wrote its shard.

The pool tag names the bytes' format: pool name, the host pool's memory layout (layer_first and
page_first hold a page's bytes in different orders at equal sizes), SGLang's own storage format tag
where the pool has one, the pipeline stage, and "flat" for the plain interface's whole-page tensors. Two
pools that differ in any of them never read each other's pages: a miss, never wrong bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvstore.blocks import member_key
from kvstore.errors import InvalidArgumentError

# SGLang's pool names (sglang.srt.mem_cache.hicache_storage.PoolName) whose state is sharded by TP rank
# even in a model whose KV is rank-replicated (MLA): Kimi-style Mamba / linear-attention state.
RANK_SHARDED_IN_MLA = frozenset({"mamba"})
_FORBIDDEN = ("#", "/")  # a page hash or tag with these would alias another key's group or pool


@dataclass(frozen=True)
class RankShape:
    """Where this process sits in the engine's parallel layout (SGLang's HiCacheStorageConfig)."""

    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    cp_rank: int = 0  # attention context parallel: each rank holds a disjoint slice of every page
    cp_size: int = 1
    dcp_rank: int = 0  # decode context parallel (MLA only): shards of one replicated page
    dcp_size: int = 1

    def __post_init__(self) -> None:
        for rank, size in (
            (self.tp_rank, self.tp_size),
            (self.pp_rank, self.pp_size),
            (self.cp_rank, self.cp_size),
            (self.dcp_rank, self.dcp_size),
        ):
            if not isinstance(rank, int) or not isinstance(size, int) or not 0 <= rank < size:
                raise InvalidArgumentError(f"a rank must be 0 <= rank < size, got {rank} of {size}")


class PageKeys:
    """The member keys this rank reads and writes for pages of each pool."""

    def __init__(self, namespace: str, shape: RankShape, *, rank_replicated: bool) -> None:
        if not namespace:
            raise InvalidArgumentError("the SGLang backend needs a non-empty namespace")
        self.namespace = namespace
        self.shape = shape
        self.rank_replicated = rank_replicated

    def is_replicated(self, pool: str) -> bool:
        """Whether every TP rank holds the same bytes of this pool (then one writer stores them)."""
        return self.rank_replicated and pool not in RANK_SHARDED_IN_MLA

    def shard(self, pool: str) -> tuple[int, int]:
        """(member index, member count) of this rank's piece of a page of `pool`."""
        s = self.shape
        index, count = (s.dcp_rank, s.dcp_size) if self.is_replicated(pool) else (s.tp_rank, s.tp_size)
        return s.cp_rank * count + index, s.cp_size * count

    def tag(self, pool: str, layout: str, format_tag: str | None = None, *, flat: bool = False) -> str:
        parts = [pool, layout or "layout?"]
        if format_tag:
            parts.append(format_tag)
        if self.shape.pp_size > 1:
            parts.append(f"pp{self.shape.pp_rank}of{self.shape.pp_size}")
        if flat:
            parts.append("flat")
        tag = ".".join(parts)
        if any(c in tag for c in _FORBIDDEN):
            raise InvalidArgumentError(f"pool name or layout {tag!r} contains one of {_FORBIDDEN}")
        return tag

    def keys(self, pool: str, tag: str, pages: Sequence[str]) -> list[str]:
        """This rank's member key for each page hash of `pool` (its bytes in the format `tag` names)."""
        index, count = self.shard(pool)
        out = []
        for page in pages:
            if not isinstance(page, str) or not page or any(c in page for c in _FORBIDDEN):
                raise InvalidArgumentError(f"a page hash is a non-empty string without # or /, got {page!r}")
            out.append(member_key(f"{self.namespace}/{tag}/{page}", index, count))
        return out
