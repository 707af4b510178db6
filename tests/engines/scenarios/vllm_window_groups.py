"""Real vLLM scheduler + worker-side connector for a hybrid layout: KV cache group 0 is sliding-window
attention (window 32 tokens, block 16: a hit reads its last 2 blocks), group 1 full attention, with vLLM's
own spec classes and HybridKVCacheCoordinator. Against one kvstore (KVSTORE_MASTER):

- instance A runs a 6-block prompt. Right after each wait_for_save returns, the window-group blocks that
  step saved are overwritten, as vLLM does when it frees blocks that leave the window and gives them to
  another request: the store must already hold them (and hold the bytes from before the overwrite);
- a fresh instance B shares A's first 4 blocks: the scheduler credits 64 tokens, B loads full-group blocks
  0..3 and window-group blocks 2..3 only (vLLM gives it null blocks for 0..1: nothing is written there),
  byte-exact with what A computed;
- a fresh instance C shares them too, but one window object is removed after its lookup: its load fails,
  is reported per request (failed_recving) and vLLM (kv_load_failure_policy "recompute") recomputes.

The model forward is the one thing simulated: each step writes, for every token it computes, a value
derived from (token, position, layer) into that token's slot of every layer, as attention would.
"""

from __future__ import annotations

import json

import torch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
from vllm_common import (
    add_request,
    connector_config,
    real_scheduler,
    record_matches,
    remove_after_lookup,
    request_block_hasher,
    runner_output,
    step_until_done,
    track_group_blocks,
    transfer_output,
)
from vllm_scheduler import HEAD, HEADS, tiny_model_dir

BLOCK = 16
WINDOW = 32
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]  # group 0 (window), group 1
NUM_BLOCKS = 64


class Instance:
    def __init__(self, model: str, on_load_failure: str = "fail") -> None:
        config = connector_config(model, BLOCK, NUM_BLOCKS, on_load_failure=on_load_failure)
        self.block_hasher = request_block_hasher(config, BLOCK)
        shape = {"block_size": BLOCK, "num_kv_heads": HEADS, "head_size": HEAD, "dtype": torch.float32}
        groups = [
            KVCacheGroupSpec([LAYERS[0]], SlidingWindowSpec(sliding_window=WINDOW, **shape)),
            KVCacheGroupSpec([LAYERS[1]], FullAttentionSpec(**shape)),
        ]
        kv_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=groups)
        self.scheduler = real_scheduler(config, kv_config, BLOCK)
        self.worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
        self.caches = {n: torch.full((NUM_BLOCKS, HEADS, BLOCK, 2 * HEAD), float("nan")) for n in LAYERS}
        self.worker.register_kv_caches(self.caches)
        self.matched = record_matches(self.scheduler)
        self.block_ids: dict[str, list[list[int]]] = {}
        self.loads: list[tuple[int, int]] = []  # (group, block id) of every object loaded
        self.failed_recving: set[str] = set()
        self.window_saved: dict[int, bytes] = {}  # window-group block's seq hash -> bytes when saved
        self.window_missing_after_save = 0
        self.before_load = lambda: None

    def run(self, request_id: str, prompt: list[int]) -> None:
        add_request(self.scheduler, request_id, prompt, 2, self.block_hasher)
        step_until_done(self.scheduler, lambda: self.step(request_id, prompt), 60)

    def step(self, req_id: str, prompt: list[int]) -> bool:
        out = self.scheduler.schedule()
        meta = out.kv_connector_metadata
        for move in meta.loads + meta.async_loads:
            self.loads += list(zip(move.groups, move.block_ids, strict=True))
        self.worker.bind_connector_metadata(meta)
        self.before_load()
        self.worker.start_load_kv(None)
        track_group_blocks(out, self.block_ids)
        # Prompt tokens are computed in a new request's first step (decode tokens are never saved).
        first = {new.req_id: new.num_computed_tokens for new in out.scheduled_new_reqs}
        for g, name in enumerate(LAYERS):
            self.worker.wait_for_layer_load(name)
            if req_id in first:
                start = first[req_id]
                end = min(start + out.num_scheduled_tokens[req_id], len(prompt))
                self.compute(g, self.block_ids[req_id][g], prompt, start, end)
        self.worker.wait_for_save()
        self.reuse_saved_window_blocks(meta)
        results = self.worker.get_transfer_results(out.finished_req_ids)
        self.failed_recving |= results.failed_recving
        errors = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        ids = list(out.num_scheduled_tokens)
        result = runner_output(ids, transfer_output(results, errors))
        self.scheduler.update_from_output(out, result)
        return bool(ids) or bool(results.finished_recving)

    def compute(self, group: int, blocks: list[int], tokens: list[int], start: int, end: int) -> None:
        for pos in range(start, end):
            assert blocks[pos // BLOCK] != 0, "a computed token landed in the null block"
            self.caches[LAYERS[group]][blocks[pos // BLOCK], :, pos % BLOCK, :] = (
                tokens[pos] * 1000 + pos + group / 10
            )

    def reuse_saved_window_blocks(self, meta) -> None:
        """As vLLM may once wait_for_save returned: hand the window blocks to another request."""
        store = self.worker.link.get()
        names = self.worker.names
        for move in meta.saves:
            for seq, digest, group, block_id in zip(
                move.seqs, move.digests, move.groups, move.block_ids, strict=True
            ):
                if group != 0:
                    continue
                count = self.worker.groups.members(group)  # head slices: one per KV head
                keys = [names.key(seq, digest, group, m, count) for m in range(count)]
                self.window_missing_after_save += not all(store.batch_exists(keys))
                self.window_saved[seq] = self.caches[LAYERS[0]][block_id].numpy().tobytes()
                self.caches[LAYERS[0]][block_id].fill_(-1.0)


def main() -> None:
    model = tiny_model_dir()
    prompt_a = [(i * 7 + 3) % 500 + 5 for i in range(6 * BLOCK)]
    prompt_b = prompt_a[: 4 * BLOCK] + [(i * 11 + 1) % 500 + 5 for i in range(BLOCK + 5)]
    a = Instance(model)
    a.run("a", prompt_a)
    a_ids = a.block_ids["a"]
    a_seqs, _ = a.worker.names.prompt(prompt_a)
    expected_window = {i: a.window_saved.get(a_seqs[i]) for i in range(6)}
    expected_full = {i: a.caches[LAYERS[1]][a_ids[1][i]].numpy().tobytes() for i in range(6)}

    b = Instance(model)
    b.run("b", prompt_b)
    b_ids = b.block_ids["b"]
    out = {
        "a_matched": a.matched,
        "a_window_saved": len(a.window_saved),
        "a_window_missing_after_save": a.window_missing_after_save,
        "b_matched": b.matched,
        "b_loads": sorted((g, b_ids[g].index(bid)) for g, bid in b.loads),
        "b_window_null": [b_ids[0][i] == 0 for i in range(4)],
        "b_full_equal": all(
            b.caches[LAYERS[1]][b_ids[1][i]].numpy().tobytes() == expected_full[i] for i in range(4)
        ),
        "b_window_equal": all(
            b.caches[LAYERS[0]][b_ids[0][i]].numpy().tobytes() == expected_window[i] for i in (2, 3)
        ),
        "b_null_untouched": bool(
            torch.isnan(b.caches[LAYERS[0]][0]).all() and torch.isnan(b.caches[LAYERS[1]][0]).all()
        ),
        "b_failed_recving": sorted(b.failed_recving),
    }

    c = Instance(model, on_load_failure="recompute")
    seqs, digests = c.worker.names.prompt(prompt_b)
    doomed = c.worker.names.key(seqs[3], digests[3], 0, 0, c.worker.groups.members(0))
    c.before_load = remove_after_lookup(c.scheduler, c.worker.link.get(), doomed)  # B's lease may hold it
    c.run("c", prompt_b)
    c_ids = c.block_ids["c"]
    out.update(
        {
            "c_matched": c.matched,
            "c_failed_recving": sorted(c.failed_recving),
            "c_full_equal": all(
                c.caches[LAYERS[1]][c_ids[1][i]].numpy().tobytes() == expected_full[i] for i in range(4)
            ),
            "c_unfinished": c.scheduler.get_num_unfinished_requests(),
        }
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
