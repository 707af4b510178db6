"""The store keys of the vLLM connector's blocks (the scheme every kvstore connector shares).

Full block i of a prompt is named by the KV-events contract's sequence hash of its prefix (seed 1337, the
same in every process: routers following the store's events credit it) and by its 128-bit namespaced chain
hash (a 64-bit collision is then a miss, never another prefix's bytes). Block i of KV cache group g is one
store group, `seq_key(ns_g, seq_i, digest_i)`, with ns_g the namespace (one KV cache group) or
`<namespace>/kv<g>`; its members are head slices: `member_key(group, s, S)`. Until the head-layout library
serves every TP size, S = 1 and each TP (and PP) rank writes its own whole block under a namespace that
names the rank (`<namespace>@t.T[/p.P]`), as the connector always has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvstore.blocks import BlockHasher, member_key, seq_hashes, seq_key


def rank_suffixes(vllm_config: Any) -> tuple[list[str], str]:
    """Namespace suffixes of every TP/PP rank (the scheduler checks all) and of this process's rank."""
    parallel = getattr(vllm_config, "parallel_config", None)
    tp = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
    pp = int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
    rank = int(getattr(parallel, "rank", 0) or 0)
    pp_rank, tp_rank = divmod(rank, tp)
    pp_ranks = range(pp) if pp > 1 else [0]
    suffixes = [f"@{t}.{tp}" + (f"/{p}.{pp}" if pp > 1 else "") for p in pp_ranks for t in range(tp)]
    mine = f"@{tp_rank}.{tp}" + (f"/{pp_rank}.{pp}" if pp > 1 else "")
    return suffixes, mine


class BlockNames:
    """Names a prompt's blocks and makes the key of (block, KV cache group, rank)."""

    def __init__(self, namespace: str, block_size: int, num_groups: int) -> None:
        self.namespace = namespace
        self.block_size = block_size
        self.num_groups = num_groups
        self._hasher = BlockHasher(block_size, namespace)

    def prompt(self, tokens: Sequence[int]) -> tuple[list[int], list[str]]:
        """(sequence hashes, digests) of every full block of `tokens`."""
        return seq_hashes(tokens, self.block_size), self._hasher.keys(tokens)

    def key(self, seq: int, digest: str, group: int, rank: str) -> str:
        """The key of block (seq, digest) of KV cache group `group`, written by rank suffix `rank`."""
        namespace = self.namespace + rank + (f"/kv{group}" if self.num_groups > 1 else "")
        return member_key(seq_key(namespace, seq, digest), 0, 1)
