"""The canonical head-slice layout: one stored copy of a KV block that a reader at any TP size reads.

A block of one KV cache group is stored as S **members** (`kvstore.blocks.member_key(group, s, S)`), member
s holding KV heads [s*H/S, (s+1)*H/S) of the model's H KV heads. A member's bytes are, in this order:

    for each layer of the group (in the connector's fixed order),
      [for each K/V part, when the engine keeps K and V apart,]
        for each head of the slice (ascending),
          for each token of the block (ascending),
            the token's content bytes for that head (vLLM >= 0.32: K then V, head_size + head_size_v values)

i.e. the logical [L, (K|V), H, N, C] order. It never depends on the writer's TP size nor on the physical
layout, so a member written by a TP=2 CUDA rank and read by a TP=4 CPU rank is the same bytes. The order is
vLLM's CPU and FlashInfer-HND page order (LBHNC): there a member of one layer is a single piece per block.

What vLLM 0.32 hands a connector (vllm/v1/kv_cache_interface.py create_kv_cache_views): per layer a
logical ``[B, H, N, C]`` view of one int8 allocation (``C`` = head_size + head_size_v values: K|V packed
per token and head; MLA: H = 1 and C = the latent + rope values) whose strides follow the resolved
KVCacheLayout: LBHNC (CPU backend; FlashInfer HND), LBNHC (flash-attn, FlashInfer NHD), BLHNC / BLNHC
(blocks outermost: a block's layers are adjacent), LHBNC (heads outermost), BHLNC. Every one of them is a
strided view with a contiguous C, which is all this module needs: it computes pieces from the strides.
When a backend splits a manager block into kernel blocks, the view has num_blocks * R rows; pass
`num_blocks` and kernel rows b*R .. b*R+R-1 make block b (its tokens in that order). Older layouts with K
and V apart (``[2, B, N, H, D]``) are described by an axis string with a ``K`` axis.

Which members a rank holds (vLLM's QKVParallelLinear): with T <= H, TP rank r holds heads
[r*H/T, (r+1)*H/T), i.e. members [r*S/T, (r+1)*S/T), and reads and writes them; S must be a multiple of T
so a rank reads whole members (else NotSupportedError). With T > H, rank r holds head r*H//T replicated
T/H times: S must equal H (a rank holds one head), and only the first replica writes. A layout not split
by heads (MLA's latent, a state every rank holds whole) is H = 1, S = 1: every rank reads member 0, only
rank 0 writes. PP changes only which layers a rank has: name layers globally; each stage's layers are a
separate member set (the connector keys them apart). DCP (token-sharded caches) is not described here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvstore.errors import InvalidArgumentError, NotSupportedError
from kvstore.integrations.paged import Pieces, Registrations, allocation, require_movable_device

AXES = "BHNCK"  # block, head, token, content (bytes of one token of one head), K/V part


@dataclass(frozen=True)
class HeadSplit:
    """Which members of a group's S head slices one TP rank reads and writes."""

    total_heads: int  # H: the model's KV heads in this group (1 for MLA and head-less layouts)
    split: int  # S: members per block; divides H
    tp_rank: int
    tp_size: int

    def __post_init__(self) -> None:
        h, s, r, t = self.total_heads, self.split, self.tp_rank, self.tp_size
        if h < 1 or t < 1 or not 0 <= r < t:
            raise InvalidArgumentError(f"bad TP geometry: {h} KV heads, rank {r} of {t}")
        if not 1 <= s <= h or h % s:
            raise InvalidArgumentError(f"head split {s} does not divide {h} KV heads")
        if t <= h and h % t:
            raise InvalidArgumentError(f"TP size {t} does not divide {h} KV heads")
        if t > h and t % h:
            raise InvalidArgumentError(f"TP size {t} is not a multiple of {h} KV heads")
        if t <= h and s % t:
            raise NotSupportedError(
                f"head split {s} is not a multiple of TP size {t}: a rank would read partial members"
            )
        if t > h and s != h:
            raise NotSupportedError(
                f"TP size {t} > {h} KV heads needs one head per member (split {h}, not {s})"
            )

    @classmethod
    def plan(cls, total_heads: int, tp_rank: int, tp_size: int, split: int | None = None) -> HeadSplit:
        """The default split is one member per KV head: every TP size that vLLM allows reads it."""
        return cls(total_heads, total_heads if split is None else split, tp_rank, tp_size)

    @property
    def count(self) -> int:
        return self.split

    @property
    def heads_per_member(self) -> int:
        return self.total_heads // self.split

    @property
    def local_heads(self) -> int:
        """KV heads in this rank's cache tensors."""
        return max(1, self.total_heads // self.tp_size)

    @property
    def replicas(self) -> int:
        """Ranks holding the same heads (T > H replicates them)."""
        return max(1, self.tp_size // self.total_heads)

    @property
    def first_head(self) -> int:
        return self.tp_rank * self.total_heads // self.tp_size

    @property
    def members(self) -> range:
        """The members this rank reads (and, if `writes`, writes)."""
        first = self.first_head // self.heads_per_member
        return range(first, first + self.local_heads // self.heads_per_member)

    @property
    def writes(self) -> bool:
        """Only the first of a head's replicas writes it (one writer per member)."""
        return self.tp_rank % self.replicas == 0


@dataclass(frozen=True)
class LayerView:
    """One layer's paged cache as byte strides over the logical axes: block b, part p (K/V kept apart,
    else one part), kernel row r of the block, local head h, token n; `content` bytes at each."""

    name: str
    base: int
    num_blocks: int
    block_stride: int
    parts: int
    part_stride: int
    rows: int  # kernel blocks per block (1 unless the backend splits blocks)
    row_stride: int
    heads: int
    head_stride: int
    tokens: int  # per kernel row
    token_stride: int
    content: int
    storage: tuple[int, int]  # the whole allocation the layer is a view of: (address, bytes)

    @property
    def block_bytes(self) -> int:
        return self.parts * self.rows * self.heads * self.tokens * self.content

    def offsets(self, heads: int) -> np.ndarray:
        """Byte offsets, from a block's first head of a slice, of its `heads` heads' (token, content)
        runs in the canonical order."""
        p, h, r, n = np.ix_(
            np.arange(self.parts), np.arange(heads), np.arange(self.rows), np.arange(self.tokens)
        )
        grid = p * self.part_stride + h * self.head_stride + r * self.row_stride + n * self.token_stride
        return np.asarray(grid, dtype=np.int64).ravel()


def layer_view(name: str, tensor: Any, axes: str = "BHNC", num_blocks: int | None = None) -> LayerView:
    """A layer's view from a CPU or CUDA torch tensor or a numpy array whose axes `axes` names (vLLM
    >= 0.32: "BHNC", any strides; K/V kept apart: e.g. "KBNHC"). `num_blocks`: the engine's blocks
    when the tensor has kernel blocks (a multiple of them)."""
    shape, strides, elem, base = _strided(name, tensor)
    if sorted(axes) != sorted(set(axes)) or not set("BHNC") <= set(axes) <= set(AXES):
        raise InvalidArgumentError(f"layer {name}: axes {axes!r} must name B, H, N, C once (and K)")
    if len(axes) != len(shape):
        raise InvalidArgumentError(f"layer {name}: axes {axes!r} for a {len(shape)}-d tensor")
    size = dict(zip(axes, shape, strict=True))
    step = {a: s * elem for a, s in zip(axes, strides, strict=True)}
    if size["C"] > 1 and step["C"] != elem:
        raise NotSupportedError(f"layer {name}: a token's content is not contiguous (strides {strides})")
    if min(step.values()) < 0 or 0 in shape:
        raise InvalidArgumentError(f"layer {name}: empty or negatively strided (shape {shape})")
    blocks, rows = size["B"], 1
    if num_blocks is not None and num_blocks != blocks:
        if num_blocks <= 0 or blocks % num_blocks:
            raise InvalidArgumentError(f"layer {name}: {blocks} kernel blocks for {num_blocks} blocks")
        blocks, rows = num_blocks, blocks // num_blocks
    return LayerView(
        name=name,
        base=base,
        num_blocks=blocks,
        block_stride=step["B"] * rows,
        parts=size.get("K", 1),
        part_stride=step.get("K", 0),
        rows=rows,
        row_stride=step["B"],
        heads=size["H"],
        head_stride=step["H"],
        tokens=size["N"],
        token_stride=step["N"],
        content=size["C"] * elem,
        storage=allocation(tensor),
    )


def _strided(name: str, tensor: Any) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """(shape, strides in elements, element bytes, address) of a CPU/CUDA tensor or a numpy array."""
    if hasattr(tensor, "data_ptr"):  # torch
        require_movable_device(name, tensor)
        return tuple(tensor.shape), tuple(tensor.stride()), tensor.element_size(), tensor.data_ptr()
    if not hasattr(tensor, "__array_interface__") or not hasattr(tensor, "strides"):
        raise InvalidArgumentError(f"layer {name}: not a tensor or array ({type(tensor).__name__})")
    elem = tensor.itemsize
    if any(s % elem for s in tensor.strides):
        raise NotSupportedError(f"layer {name}: strides {tensor.strides} are not whole elements")
    strides = tuple(s // elem for s in tensor.strides)
    return tuple(tensor.shape), strides, elem, int(tensor.__array_interface__["data"][0])


class HeadLayout(Registrations):
    """One rank's layers of one KV cache group and its head split: the pieces of its members."""

    def __init__(self, layers: Sequence[LayerView], split: HeadSplit) -> None:
        if not layers:
            raise InvalidArgumentError("no KV cache layers to register")
        for layer in layers:
            if layer.heads != split.local_heads:
                raise InvalidArgumentError(
                    f"layer {layer.name} holds {layer.heads} KV heads; rank {split.tp_rank} of "
                    f"{split.tp_size} over {split.total_heads} heads holds {split.local_heads}"
                )
        super().__init__([layer.storage for layer in layers])
        self.layers = list(layers)
        self.split = split
        per = split.heads_per_member
        self.member_bytes = sum(layer.block_bytes // layer.heads * per for layer in self.layers)
        runs = [_coalesce_one(layer.offsets(per), layer.content) for layer in self.layers]
        self._bases = np.array([layer.base for layer in self.layers], dtype=np.int64)
        self._strides = np.array([layer.block_stride for layer in self.layers], dtype=np.int64)
        self._shifts = np.array([layer.head_stride * per for layer in self.layers], dtype=np.int64)
        self._num_blocks = np.array([layer.num_blocks for layer in self.layers], dtype=np.int64)
        # One member's runs over every layer, fixed at registration: a batch's pieces are then one
        # broadcast of each object's (layer) starts over this template, with no loop over layers.
        per_layer = np.array([len(lengths) for _, lengths in runs], dtype=np.int64)
        self._run_layer = np.repeat(np.arange(len(self.layers)), per_layer)
        self._run_offsets = np.concatenate([offsets for offsets, _ in runs]) + self._bases[self._run_layer]
        self._run_lengths = np.concatenate([lengths for _, lengths in runs]).astype(np.uint64)
        # Runs of one layer never merge in a batch (one shift moves them all); a layer's last run can
        # meet the next layer's first (layers adjacent in memory), which only a batch's blocks decide.
        self._last_runs = np.cumsum(per_layer)[:-1] - 1
        self._last_lengths = self._run_lengths[self._last_runs].astype(np.int64)
        self._one_run_per_layer = bool((per_layer == 1).all())
        # The same for blocks with one id in every layer (one block table per group, as vLLM keeps):
        # each run's shift per block, and each of this rank's members' runs at block 0.
        self._run_strides = self._strides[self._run_layer]
        self._member_runs = (
            np.arange(len(split.members), dtype=np.int64)[:, None] * self._shifts[self._run_layer]
            + self._run_offsets
        )
        self._fewest_blocks = int(self._num_blocks.min())

    @property
    def count(self) -> int:
        return self.split.count

    @property
    def members(self) -> range:
        return self.split.members

    @property
    def writes(self) -> bool:
        return self.split.writes

    def many_pieces(
        self, rows: Sequence[Sequence[int]] | np.ndarray, members: Sequence[int] | np.ndarray
    ) -> Pieces:
        """The pieces of member members[i] of the block whose id in each layer is rows[i] (the layers'
        order), in the canonical order, adjacent pieces merged."""
        blocks = self._blocks(rows)
        wanted = np.asarray(members, dtype=np.int64).reshape(-1)
        if len(wanted) != len(blocks):
            raise InvalidArgumentError(f"{len(wanted)} members for {len(blocks)} rows")
        mine = self.split.members
        if len(wanted) and (wanted.min() < mine.start or wanted.max() >= mine.stop):
            raise InvalidArgumentError(
                f"rank {self.split.tp_rank} of {self.split.tp_size} holds members {mine.start}.."
                f"{mine.stop - 1} of {self.count}, not {sorted(set(wanted.tolist()) - set(mine))}"
            )
        return self._pieces(blocks, wanted - mine.start)

    def rank_pieces(self, rows: Sequence[Sequence[int]] | np.ndarray) -> tuple[Pieces, np.ndarray]:
        """Every member this rank holds of each block: (pieces, member per object), object i*m + j being
        member members[j] of rows[i]."""
        blocks = self._blocks(rows)
        mine = self.split.members
        local = np.tile(np.arange(len(mine), dtype=np.int64), len(blocks))
        # (the blocks checked once, the members this rank's own: none of many_pieces' checks again)
        pieces = self._pieces(np.repeat(blocks, len(mine), axis=0), local)
        return pieces, local + mine.start

    def rank_block_pieces(self, block_ids: Sequence[int] | np.ndarray) -> Pieces:
        """rank_pieces of blocks whose id is the same in every layer (one block table for the group):
        object i*m + j is member members[j] of block_ids[i]. One broadcast for the batch."""
        ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self._fewest_blocks):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise InvalidArgumentError(
                f"block {bad} outside the group's layers ({self._fewest_blocks} blocks)"
            )
        addrs = ids[:, None, None] * self._run_strides + self._member_runs  # (block, member, run)
        return self._as_pieces(addrs.reshape(-1, self._member_runs.shape[1]))

    def _pieces(self, blocks: np.ndarray, local: np.ndarray) -> Pieces:
        """many_pieces of checked block rows and members counted from this rank's first."""
        starts = blocks * self._strides + local[:, None] * self._shifts  # (object, layer) shifts
        shifts = starts if self._one_run_per_layer else starts[:, self._run_layer]
        return self._as_pieces(shifts + self._run_offsets)

    def _as_pieces(self, addrs: np.ndarray) -> Pieces:
        """Pieces of objects given as (object, run) start addresses; a layer's last run that meets the
        next layer's first (layers adjacent in memory) merged with it."""
        runs = len(self._run_lengths)
        pieces = Pieces(
            addrs.ravel().view(np.uint64),
            np.tile(self._run_lengths, len(addrs)),
            np.full(len(addrs), runs, dtype=np.int64),
        )
        first_runs = self._last_runs + 1
        if len(first_runs) and (addrs[:, self._last_runs] + self._last_lengths == addrs[:, first_runs]).any():
            return coalesce(pieces)
        return pieces

    def _blocks(self, rows: Sequence[Sequence[int]] | np.ndarray) -> np.ndarray:
        blocks = np.asarray(rows, dtype=np.int64)
        if blocks.size == 0:
            return np.zeros((0, len(self.layers)), dtype=np.int64)
        if blocks.ndim != 2 or blocks.shape[1] != len(self.layers):
            raise InvalidArgumentError(
                f"block ids must be given per object and per layer ({len(self.layers)})"
            )
        outside = (blocks < 0) | (blocks >= self._num_blocks)
        if outside.any():
            row, layer = (int(x[0]) for x in np.nonzero(outside))
            raise InvalidArgumentError(
                f"block {int(blocks[row, layer])} outside layer {self.layers[layer].name} "
                f"({self.layers[layer].num_blocks} blocks)"
            )
        return blocks


def _coalesce_one(offsets: np.ndarray, content: int) -> tuple[np.ndarray, np.ndarray]:
    """One template's runs (offsets, lengths), adjacent ones merged."""
    lengths = np.full(len(offsets), content, dtype=np.uint64)
    merged = coalesce(Pieces(offsets.astype(np.uint64), lengths, np.array([len(offsets)])))
    return merged.addrs.astype(np.int64), merged.lengths


def coalesce(pieces: Pieces) -> Pieces:
    """The same objects with each run of pieces that follow one another in memory merged into one
    (never across objects)."""
    addrs, lengths, counts = pieces
    if len(addrs) == 0:
        return pieces
    first = np.zeros(len(addrs), dtype=bool)
    first[np.cumsum(counts)[:-1][counts[1:] > 0]] = True
    first[0] = True
    joins = np.zeros(len(addrs), dtype=bool)
    joins[1:] = addrs[:-1] + lengths[:-1] == addrs[1:]
    starts = np.flatnonzero(~joins | first)
    owner = np.repeat(np.arange(len(counts)), counts)[starts]
    return Pieces(
        addrs[starts],
        np.add.reduceat(lengths, starts).astype(np.uint64),
        np.bincount(owner, minlength=len(counts)).astype(np.int64),
    )


__all__ = ["HeadLayout", "HeadSplit", "LayerView", "coalesce", "layer_view"]
