"""Mamba / linear-attention state groups in the vLLM connector: where a block holds a state, how it is split
across TP ranks, and how its bytes are laid out.

Where (vLLM 0.32, MambaSpec with mamba_cache_mode "align"). A state block is written where the model runner
puts a prefill chunk's final state or a prefill checkpoint; which block holds the state after which token
is the scheduler's to say, and it says so exactly: every step, the state blocks whose state is cached (the
ones a later request may hit) are offered to the connector with their block id and boundary
(`SchedulerOutput.kv_connector_block_state.boundary_state_offloads`, {request: [(group, block id, boundary
tokens)]}; MambaManager.cache_blocks builds them). The offered state is written by that step's forward pass
and vLLM may free and reuse the block from the next step on, so the connector stores it before
wait_for_save returns, as it does for window blocks. A boundary that is not a whole number of blocks (a
partial tail) is not saved: store keys name whole blocks.

How it splits. A rank's state is its share of the model's state (conv state and SSM state sharded over the
rank's heads / channels), which is not ordered by KV heads: a rank's bytes are one member of a group of TP
members, readable only at the same TP size, so a sharded state group's keys carry the TP size (and a digest
of the per-rank state shapes and dtypes: two layouts never share a key). A state every rank holds whole
(MambaSpec.tp_replicated) is one member, written by rank 0 and read by all, at any TP size.

Bytes. vLLM hands the connector a state layer as a `[B, H, N, C]` view of the KV allocation (C: the state's
bytes); a member holds, for each layer of the group, the block's H x N runs of C bytes in that order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from kvstore.errors import NotSupportedError
from kvstore.integrations.head_layout import LayerView


def state_heads(spec: Any, tp_size: int) -> int:
    """Members of a state block: one per TP rank when the state is sharded, else 1."""
    return 1 if getattr(spec, "tp_replicated", False) else max(1, tp_size)


def state_suffix(spec: Any, tp_size: int) -> str:
    """The key suffix of a state group: a sharded state is readable only at the writer's TP size and
    per-rank state layout."""
    layout = repr((getattr(spec, "shapes", None), [str(d) for d in getattr(spec, "dtypes", ()) or ()]))
    digest = hashlib.sha256(layout.encode()).hexdigest()[:8]
    if getattr(spec, "tp_replicated", False):
        return f"/state-{digest}"
    return f"/tp{max(1, tp_size)}-{digest}"


def state_view(view: LayerView) -> LayerView:
    """A state layer's block as one member: its H axis becomes the rows of a single head (the rank's whole
    state), so a member holds every (h, n) run of the block in order."""
    if view.rows != 1 or view.parts != 1:
        raise NotSupportedError(f"state layer {view.name}: kernel blocks or K/V parts in a state layout")
    return replace(view, rows=view.heads, row_stride=view.head_stride, heads=1, head_stride=view.block_stride)


def checkpointed_blocks(
    offers: Iterable[tuple[int, int, int]], groups: set[int], block_size: int, first: int, end: int
) -> list[tuple[int, int, int]]:
    """(block index, group, block id) of the offered states that sit on a whole block boundary of a
    prompt block in [first, end) of a state group `groups` holds; every other offer is ignored."""
    picked = []
    for group, block_id, boundary in offers:
        if group not in groups or block_id <= 0 or boundary <= 0 or boundary % block_size:
            continue
        index = boundary // block_size - 1
        if first <= index < end:
            picked.append((index, group, block_id))
    return picked


__all__ = ["checkpointed_blocks", "state_heads", "state_suffix", "state_view"]
