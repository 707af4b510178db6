"""The vLLM connector's scheduler side (kvstore.integrations.vllm): which blocks of a prompt the store
holds for every KV cache group, and the loads and saves each step's metadata carries to the workers."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvstore.errors import KVStoreError
from kvstore.integrations.paged import ceil_blocks, full_blocks
from kvstore.integrations.vllm_groups import longest_hit
from kvstore.integrations.vllm_metadata import NULL_BLOCK_ID, BlockMove, KVStoreConnectorMetadata
from kvstore.integrations.vllm_state import checkpointed_blocks

if TYPE_CHECKING:
    from kvstore.integrations.vllm import KVStoreConnector

log = logging.getLogger("kvstore.vllm")


@dataclass
class _Tracked:
    """A request the scheduler side follows from lookup to finish."""

    seqs: list[int]  # the prompt's full blocks: sequence hashes
    digests: list[str]  # ... and 128-bit chain digests
    hit: int  # blocks of the hit (vLLM's own and the store's) at lookup
    local_blocks: int = 0  # leading blocks vLLM had itself
    load: tuple[int, int] | None = None  # blocks from..to whose objects to load
    block_ids: list[list[int]] = field(default_factory=list)  # [group][block position]
    saved: int = 0  # blocks whose save has been scheduled (or that need none)
    saves_scheduled: bool = False


class SchedulerSide:
    def __init__(self, connector: KVStoreConnector) -> None:
        self.c = connector
        self.requests: dict[str, _Tracked] = {}
        self.pending = KVStoreConnectorMetadata()

    def matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        c = self.c
        tokens = list(getattr(request, "prompt_token_ids", None) or [])
        if not c.active or not tokens:
            return 0, False
        known = self.requests.get(request.request_id)  # asked again while it waits: same prompt, same keys
        if known is not None and len(known.seqs) == full_blocks(len(tokens), c.block_size):
            seqs, digests = known.seqs, known.digests
        else:
            seqs, digests = c.names.prompt(tokens)
        usable = full_blocks(len(tokens) - 1, c.block_size)  # vLLM computes at least one token
        local = full_blocks(num_computed_tokens, c.block_size)
        hit = self._hit(seqs[:usable], digests[:usable], local)
        tracked = _Tracked(seqs, digests, hit, local_blocks=local)
        tracked.saved = hit
        self.requests[request.request_id] = tracked
        extra = max(0, hit - local) * c.block_size
        return extra, extra > 0 and c.async_loads

    def _hit(self, seqs: list[int], digests: list[str], local: int) -> int:
        """Blocks of the longest prefix every group can be served (vLLM's own first, then the store's)."""
        width = len(seqs) - local
        if width <= 0:
            return local
        store = self.c.link.get()
        if store is None:
            return local
        # Member 0 of each (block, group, stage): the master shows a member only while its group is whole.
        stages, groups = self.c.all_stages, range(len(self.c.groups.rules))
        keys = [
            self.c.names.key(
                seqs[i], digests[i], g, 0, self.c.groups.members(g), stage + self.c.groups.suffix(g)
            )
            for g in groups
            for i in range(local, len(seqs))
            for stage in stages
        ]
        try:
            flags = store.batch_exists(keys)
        except KVStoreError as exc:
            log.warning("kvstore lookup failed (%s): treating as a miss", exc)
            return local
        per = len(stages)
        present = [
            [all(flags[(g * width + j) * per : (g * width + j + 1) * per]) for j in range(width)]
            for g in groups
        ]
        rules = [r for r in self.c.groups.rules if r is not None]
        hit = longest_hit(rules, present, local)
        self.c.mover.count_lookup(hit - local)
        return hit

    def after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        tracked = self.requests.get(request.request_id)
        if tracked is None or num_external_tokens <= 0:
            return
        end = min(tracked.local_blocks + ceil_blocks(num_external_tokens, self.c.block_size), tracked.hit)
        tracked.load = (tracked.local_blocks, end)
        if self.c.async_loads:  # an asynchronous load: it starts before the request is scheduled
            tracked.block_ids = [list(ids) for ids in blocks.get_block_ids()]
            self.pending.async_loads.append(self._load_move(request.request_id, tracked))
            tracked.load = None

    def build_meta(self, scheduler_output: Any) -> KVStoreConnectorMetadata:
        meta, self.pending = self.pending, KVStoreConnectorMetadata()
        scheduled = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            tracked = self.requests.get(new.req_id)
            if tracked is None:
                continue
            tracked.block_ids = [list(ids) for ids in new.block_ids]
            if tracked.load is not None:
                meta.loads.append(self._load_move(new.req_id, tracked))
                tracked.load = None
            computed = new.num_computed_tokens
            self._plan_save(meta, new.req_id, tracked, computed, computed + scheduled.get(new.req_id, 0))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            tracked = self.requests.get(req_id)
            if tracked is None:
                continue
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                tracked.block_ids = [list(ids) for ids in (new_ids or [])]
            elif new_ids is not None:
                for group, ids in enumerate(new_ids):
                    tracked.block_ids[group].extend(ids)
            computed = cached.num_computed_tokens[i]
            self._plan_save(meta, req_id, tracked, computed, computed + scheduled.get(req_id, 0))
        self._plan_state_saves(meta, scheduler_output)
        return meta

    def _plan_state_saves(self, meta: KVStoreConnectorMetadata, scheduler_output: Any) -> None:
        """Saves of the state blocks vLLM says hold a cached state this step (kvstore.integrations.
        vllm_state): the prompt's blocks past the hit (the store had those the hit needed)."""
        block_state = getattr(scheduler_output, "kv_connector_block_state", None)
        offers = getattr(block_state, "boundary_state_offloads", None) or {}
        groups = {g for g in range(len(self.c.groups.rules)) if self.c.groups.holds_state(g)}
        for req_id, entries in offers.items():
            tracked = self.requests.get(req_id)
            if tracked is None or not groups:
                continue
            move = BlockMove(req_id)
            picked = checkpointed_blocks(entries, groups, self.c.block_size, tracked.hit, len(tracked.seqs))
            for index, group, block_id in picked:
                move.add(tracked.seqs[index], tracked.digests[index], group, block_id)
            if len(move):
                meta.saves.append(move)

    def _load_move(self, req_id: str, tracked: _Tracked) -> BlockMove:
        """The objects a hit ending at the load's end reads, past vLLM's own blocks."""
        assert tracked.load is not None
        first, end = tracked.load
        move = BlockMove(req_id)
        for g, rule in enumerate(self.c.groups.rules):
            assert rule is not None  # (the connector is inactive otherwise)
            ids = tracked.block_ids[g]
            if rule.holds_state and (end > len(ids) or ids[end - 1] == NULL_BLOCK_ID):
                # The hit's state has nowhere to go: without it the request would run from a wrong state.
                log.warning("kvstore: no state block for %s at block %d; its load fails", req_id, end - 1)
                move.unloadable = True
                continue
            for i in range(max(first, rule.first_needed(end)), min(end, len(ids))):
                if (
                    ids[i] == NULL_BLOCK_ID and not rule.reads_every_block
                ):  # (rules disagree): never load there
                    log.warning("kvstore: group %d block %d of %s is null; not loaded", g, i, req_id)
                    continue
                move.add(tracked.seqs[i], tracked.digests[i], g, ids[i])
        return move

    def _plan_save(
        self, meta: KVStoreConnectorMetadata, req_id: str, tracked: _Tracked, before: int, computed: int
    ) -> None:
        """Saves of the prompt blocks this step completes. A group's blocks vLLM may have freed by now
        (below its window once `before` tokens were computed) and null blocks are never read."""
        end = min(len(tracked.seqs), full_blocks(computed, self.c.block_size))
        end = min(end, min((len(ids) for ids in tracked.block_ids), default=0))
        if end <= tracked.saved:
            return
        move = BlockMove(req_id)
        for g, rule in enumerate(self.c.groups.rules):
            assert rule is not None
            if rule.holds_state:  # saved only where vLLM offers a checkpoint (_plan_state_saves)
                continue
            ids = tracked.block_ids[g]
            freed = rule.skipped_tokens(before) // rule.block_size  # vLLM may have freed these already
            for i in range(max(tracked.saved, freed), end):
                if ids[i] != NULL_BLOCK_ID or rule.reads_every_block:
                    move.add(tracked.seqs[i], tracked.digests[i], g, ids[i])
        tracked.saved = end
        if len(move):
            meta.saves.append(move)
            tracked.saves_scheduled = True

    def finished(self, request: Any) -> tuple[bool, dict[str, Any] | None]:
        tracked = self.requests.pop(request.request_id, None)
        # Saves still in flight read these blocks: keep them until the workers say the saves are done.
        return (tracked is not None and tracked.saves_scheduled), None
