"""The vLLM connector's worker side (kvstore.integrations.vllm): each rank's members of the blocks a step
loads and saves, moved straight from and into vLLM's KV cache tensors."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np

from kvstore.errors import InvalidArgumentError
from kvstore.integrations.head_layout import HeadLayout, HeadSplit, layer_view
from kvstore.integrations.paged import (
    Batch,
    Pieces,
    Registrations,
)
from kvstore.integrations.vllm_metadata import BlockMove, KVStoreConnectorMetadata
from kvstore.integrations.vllm_state import state_view

if TYPE_CHECKING:
    from kvstore.integrations.vllm import KVStoreConnector

log = logging.getLogger("kvstore.vllm")


class WorkerSide:
    def __init__(self, connector: KVStoreConnector) -> None:
        self.c = connector
        self.layouts: dict[int, HeadLayout] = {}  # per KV cache group with layers on this rank
        self.registrations: Registrations | None = None
        self._load_errors: set[int] = set()
        self._async: dict[str, Future[list[bool]]] = {}  # requests waiting for their KV
        self._failed_recv: set[str] = set()
        self._saves: dict[str, list[Future[list[bool]]]] = {}
        self._finishing: set[str] = set()
        self._lock = threading.Lock()

    def register(self, kv_caches: dict[str, Any]) -> None:
        """Each group's layers (vLLM >= 0.32 hands [blocks, heads, tokens, K|V] views) and this rank's
        share of its head slices."""
        c = self.c
        self.layouts = {}
        for g, names in enumerate(c.groups.layers):
            mine = [n for n in names if n in kv_caches]
            if mine:
                split = HeadSplit.plan(c.groups.heads[g], c.tp_rank, c.tp_size, c.groups.members(g))
                views = [layer_view(n, kv_caches[n]) for n in mine]
                if c.groups.holds_state(g):  # a rank's whole state is one member
                    views = [state_view(view) for view in views]
                self.layouts[g] = HeadLayout(views, split)
        if not self.layouts:  # no config (or names differ): every layer, in the engine's own order
            split = HeadSplit.plan(c.groups.heads[0], c.tp_rank, c.tp_size, c.groups.members(0))
            self.layouts[0] = HeadLayout([layer_view(n, t) for n, t in kv_caches.items()], split)
        self.registrations = Registrations([s for layout in self.layouts.values() for s in layout.spans])
        store = self.c.link.get()
        if store is not None:
            self.registrations.register(store)

    def _batch(
        self, moves: Sequence[BlockMove], groups: Callable[[int], bool] = lambda g: True, saving: bool = False
    ) -> Batch:
        """The members this rank holds of the objects of `moves` in groups `groups`, ordered by group (when
        `saving`, only those it writes: one writer per member)."""
        if self.registrations is None:
            raise InvalidArgumentError("register_kv_caches was not called")
        store = self.c.link.get()
        if store is not None and self.c.kv_memory_awake:  # (asleep: the memory is not the cache's now)
            self.registrations.register(store)  # no-op once done; after a late connection it registers now
        batch = Batch()
        parts = []
        names, stage = self.c.names, self.c.my_stage
        for g, layout in self.layouts.items():
            if not groups(g) or (saving and not layout.writes):
                continue
            blocks = [
                (seq, digest, block_id)
                for move in moves
                for seq, digest, group, block_id in zip(
                    move.seqs, move.digests, move.groups, move.block_ids, strict=True
                )
                if group == g
            ]
            pieces = layout.rank_block_pieces([block_id for *_, block_id in blocks])
            mine = list(layout.members)  # (block i's members in this order, block by block)
            group_stage = stage + self.c.groups.suffix(g)
            for seq, digest, block_id in blocks:
                batch.keys += names.keys(seq, digest, g, mine, layout.count, group_stage)
                batch.tags += [block_id] * len(mine)
            parts.append(pieces)
        batch.pieces = _concat(parts)
        return batch

    def start_load(self, meta: KVStoreConnectorMetadata) -> None:
        for move in meta.async_loads:
            self._async[move.req_id] = (
                self._unloadable() if move.unloadable else self.c.mover.load(self._batch([move]))
            )
        if not meta.loads:
            return
        # A step's synchronous loads run here rather than on the mover's thread: vLLM's first attention
        # layer waits for the whole load (an object holds every layer of its block), so a thread overlapped
        # almost nothing (the embedding) and cost two wake-ups a step.
        batch = self._batch(meta.loads)
        ok = self.c.mover.load_here(batch)
        self._load_errors.update(b for good, b in zip(ok, batch.tags, strict=True) if not good)

    @staticmethod
    def _unloadable() -> Future[list[bool]]:
        failed: Future[list[bool]] = Future()
        failed.set_result([False])
        return failed

    def load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def finished_loads(self) -> set[str]:
        """Requests whose asynchronous load ended; those with a failed object go to failed_recving too
        (vLLM recomputes them)."""
        done = {r for r, f in self._async.items() if f.done()}
        for req_id in done:
            if not all(self._async.pop(req_id).result()):
                self._failed_recv.add(req_id)
        return done

    def take_failed_loads(self) -> set[str]:
        failed, self._failed_recv = self._failed_recv, set()
        return failed

    def save(self, meta: KVStoreConnectorMetadata) -> None:
        if not meta.saves:
            return
        # vLLM frees a window group's blocks that leave the window while the request still runs and may
        # give them to another request next step: those are stored before wait_for_save returns.
        bounded = self._batch(meta.saves, lambda g: not self._reads_every_block(g), saving=True)
        if bounded.keys:
            self.c.mover.save(bounded).result()
        future = self.c.mover.save(self._batch(meta.saves, self._reads_every_block, saving=True))
        with self._lock:
            for req_id in {move.req_id for move in meta.saves}:
                self._saves.setdefault(req_id, []).append(future)

    def _reads_every_block(self, group: int) -> bool:
        rule = self.c.groups.rules[group]
        return rule is None or rule.reads_every_block

    def finished(self, finished_req_ids: set[str]) -> set[str] | None:
        with self._lock:
            self._finishing |= {r for r in finished_req_ids if r in self._saves}
            done = {r for r in self._finishing if all(f.done() for f in self._saves[r])}
            for r in done:
                self._finishing.discard(r)
                del self._saves[r]
        return done or None

    def drain(self) -> None:
        """Every save submitted so far is done (before blocks of preempted requests are reused)."""
        self.c.mover.drain()


def _concat(parts: list[Pieces]) -> Pieces:
    if not parts:
        empty = np.zeros(0, dtype=np.uint64)
        return Pieces(empty, empty.copy(), np.zeros(0, dtype=np.int64))
    if len(parts) == 1:
        return parts[0]
    return Pieces(*(np.concatenate(arrays) for arrays in zip(*parts, strict=True)))
