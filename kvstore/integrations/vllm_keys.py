"""The store keys of the vLLM connector's blocks (the scheme every kvstore connector shares).

Full block i of a prompt is named by the KV-events contract's sequence hash of its prefix (seed 1337, the
same in every process: routers following the store's events credit it) and by its 128-bit namespaced chain
hash (a 64-bit collision is then a miss, never another prefix's bytes). Block i of KV cache group g is one
store group, `seq_key(ns_g, seq_i, digest_i)`, with ns_g the namespace (one KV cache group) or
`<namespace>/kv<g>`; its members are the group's head slices, `member_key(group, s, S)`, in the canonical
order of kvstore.integrations.head_layout, so a reader at any TP size reads what a writer at another wrote.
Pipeline stages hold different layers: with PP > 1 each stage's blocks are apart (`<namespace>/pp<p>.<P>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvstore.blocks import BlockHasher, member_key, member_keys, seq_hashes, seq_key


def parallel_ranks(vllm_config: Any) -> tuple[int, int, list[str], str]:
    """(TP rank, TP size, namespace suffixes of every PP stage (the scheduler checks all), this stage's)."""
    parallel = getattr(vllm_config, "parallel_config", None)
    tp = int(getattr(parallel, "tensor_parallel_size", 1) or 1)
    pp = int(getattr(parallel, "pipeline_parallel_size", 1) or 1)
    rank = int(getattr(parallel, "rank", 0) or 0)
    pp_rank, tp_rank = divmod(rank, tp)
    if pp == 1:
        return tp_rank, tp, [""], ""
    return tp_rank, tp, [f"/pp{p}.{pp}" for p in range(pp)], f"/pp{pp_rank}.{pp}"


class BlockNames:
    """Names a prompt's blocks and makes the key of (block, KV cache group, head slice, PP stage)."""

    def __init__(self, namespace: str, block_size: int, num_groups: int) -> None:
        self.namespace = namespace
        self.block_size = block_size
        self.num_groups = num_groups
        self._hasher = BlockHasher(block_size, namespace)

    def prompt(self, tokens: Sequence[int]) -> tuple[list[int], list[str]]:
        """(sequence hashes, digests) of every full block of `tokens`."""
        return seq_hashes(tokens, self.block_size), self._hasher.keys(tokens)

    def key(self, seq: int, digest: str, group: int, member: int, count: int, stage: str = "") -> str:
        """Member `member` of `count` of block (seq, digest) of KV cache group `group` in PP stage `stage`."""
        return member_key(self.group_key(seq, digest, group, stage), member, count)

    def keys(
        self, seq: int, digest: str, group: int, members: Sequence[int], count: int, stage: str = ""
    ) -> list[str]:
        """key() of several members of one block (its group key made once)."""
        return member_keys(self.group_key(seq, digest, group, stage), members, count)

    def group_key(self, seq: int, digest: str, group: int, stage: str = "") -> str:
        """The store group of block (seq, digest) of KV cache group `group` in PP stage `stage`."""
        return seq_key(self.namespace + stage + (f"/kv{group}" if self.num_groups > 1 else ""), seq, digest)
