"""Which blocks of each vLLM KV cache group a prefix hit needs, by vLLM's own rule for the group.

vLLM frees (and leaves null) the blocks an attention type no longer reads: for a hit whose next token is
token T, group g reads only blocks `skipped_g(T) // block_size ..` up to the hit's end, where skipped_g is
the group manager's get_num_skipped_tokens (vllm/v1/core/single_type_kv_cache_manager.py):

    full attention, MLA      0                                   (every block of the hit)
    sliding window w         max(0, T - w + 1 - extra_retained)  (the last ceil((w - 1) / bs) blocks)
    chunked local, chunk c   T // c * c                          (the blocks of T's chunk)
    Mamba / linear-attention T - 1                               (the hit's last block: its state)

A state group (MambaSpec in vLLM's "align" mode, the default with prefix caching) holds in block i the
recurrent state after token (i + 1) * block_size, and only where vLLM checkpointed it: vLLM's own hit
(MambaManager.find_longest_cache_hit) ends where the state of its last block is cached, and so does the
connector's. Which blocks hold a valid state is vLLM's to say (kvstore.integrations.vllm_state).

The external hit is the longest prefix for which every group finds what it reads; a block a group skips is
neither loaded (vLLM gives it the null block) nor needed. Groups of other kinds (Mamba in another cache
mode or with speculative blocks, R-SWA, cross attention) are not served: a model that has one gets no
external hits, so nothing is counted that a group cannot load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvstore.errors import InvalidArgumentError

FULL, WINDOW, CHUNKED, STATE = "full", "window", "chunked", "state"
# vLLM's KV cache spec classes, by exact name (subclasses such as RSWASpec follow other rules).
_SPEC_KINDS = {
    "FullAttentionSpec": FULL,
    "MLAAttentionSpec": FULL,
    "SinkFullAttentionSpec": FULL,
    "SlidingWindowSpec": WINDOW,
    "SlidingWindowMLASpec": WINDOW,
    "ChunkedLocalAttentionSpec": CHUNKED,
    "MambaSpec": STATE,
}


@dataclass(frozen=True)
class GroupRule:
    """One KV cache group's rule: which of a hit's blocks it reads."""

    kind: str  # FULL, WINDOW, CHUNKED or STATE
    block_size: int
    span: int = 0  # WINDOW: the window in tokens; CHUNKED: the chunk size in tokens
    extra_retained: int = 0  # WINDOW: tokens below the window vLLM keeps as well

    def __post_init__(self) -> None:
        if self.kind not in (FULL, WINDOW, CHUNKED, STATE):
            raise InvalidArgumentError(f"unknown KV cache group kind {self.kind!r}")
        spanned = self.kind in (WINDOW, CHUNKED)
        if self.block_size <= 0 or (spanned and self.span <= 0) or self.extra_retained < 0:
            raise InvalidArgumentError(f"a {self.kind} group needs a positive block size and span")

    @property
    def reads_every_block(self) -> bool:
        """Full attention: no block of a running request is ever freed before it finishes."""
        return self.kind == FULL

    @property
    def holds_state(self) -> bool:
        """A recurrent state group: a block is saved only where vLLM says it holds a checkpoint."""
        return self.kind == STATE

    def skipped_tokens(self, num_tokens: int) -> int:
        """vLLM's get_num_skipped_tokens for this group once `num_tokens` tokens are computed."""
        if self.kind == WINDOW:
            return max(0, num_tokens - self.span + 1 - self.extra_retained)
        if self.kind == CHUNKED:
            return num_tokens // self.span * self.span
        if self.kind == STATE:  # MambaManager keeps the state of the last computed token only
            return max(0, num_tokens - 1)
        return 0

    def first_needed(self, end_block: int) -> int:
        """The first block a hit of `end_block` blocks reads in this group (the ones before are null)."""
        return min(end_block, self.skipped_tokens(end_block * self.block_size) // self.block_size)

    def needed(self, end_block: int) -> range:
        return range(self.first_needed(end_block), end_block)


def rule_for_spec(spec: Any) -> GroupRule | None:
    """The rule of a vLLM KV cache spec, or None for a kind kvstore does not serve."""
    kind = _SPEC_KINDS.get(type(spec).__name__)
    block_size = int(getattr(spec, "block_size", 0) or 0)
    if kind is None or block_size <= 0:
        return None
    if kind == WINDOW:
        window = getattr(spec, "sliding_window", None)
        extra = int(getattr(spec, "extra_retained_tokens", 0) or 0)
        return GroupRule(WINDOW, block_size, int(window), extra) if window else None
    if kind == CHUNKED:
        chunk = getattr(spec, "attention_chunk_size", None)
        return GroupRule(CHUNKED, block_size, int(chunk)) if chunk else None
    if kind == STATE:
        # Only "align" mode keeps states at block boundaries; speculative blocks move the running state
        # around in the block table (not followed here).
        aligned = getattr(spec, "mamba_cache_mode", None) == "align"
        speculative = int(getattr(spec, "num_speculative_blocks", 0) or 0)
        return GroupRule(STATE, block_size) if aligned and not speculative else None
    return GroupRule(FULL, block_size)


def longest_hit(rules: Sequence[GroupRule], present: Sequence[Sequence[bool]], local_blocks: int) -> int:
    """The most blocks n (n > local_blocks, else local_blocks) such that every group holds every block
    it reads for a hit of n blocks, from the store (`present[g][i - local_blocks]` for block i >=
    local_blocks) or from vLLM's own cache (blocks below local_blocks)."""
    if len(rules) != len(present) or not rules:
        raise InvalidArgumentError("one existence row per KV cache group is needed")
    width = len(present[0])
    if any(len(row) != width for row in present):
        raise InvalidArgumentError("every group's existence row must cover the same blocks")
    # missing[g][j]: blocks local_blocks .. local_blocks + j - 1 of group g the store lacks.
    missing = []
    for row in present:
        counts = [0]
        for flag in row:
            counts.append(counts[-1] + (0 if flag else 1))
        missing.append(counts)
    for end in range(local_blocks + width, local_blocks, -1):
        if all(_holds(rule, counts, end, local_blocks) for rule, counts in zip(rules, missing, strict=True)):
            return end
    return local_blocks


def _holds(rule: GroupRule, missing: list[int], end: int, local_blocks: int) -> bool:
    first = max(rule.first_needed(end), local_blocks) - local_blocks
    return missing[end - local_blocks] - missing[min(first, end - local_blocks)] == 0
