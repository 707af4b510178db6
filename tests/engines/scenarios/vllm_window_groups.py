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
import time

import torch
from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager
from vllm_scheduler import HEAD, HEADS, tiny_model_dir

from kvstore.errors import ObjectBusyError

BLOCK = 16
WINDOW = 32
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]  # group 0 (window), group 1
NUM_BLOCKS = 64


class Instance:
    def __init__(self, model: str, on_load_failure: str = "fail") -> None:
        config = VllmConfig(
            model_config=ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32", seed=0),
            cache_config=CacheConfig(block_size=BLOCK),
            kv_transfer_config=KVTransferConfig(
                kv_connector="KVStoreConnector",
                kv_connector_module_path="kvstore.integrations.vllm",
                kv_role="kv_both",
                kv_connector_extra_config={},
                kv_load_failure_policy=on_load_failure,
            ),
        )
        config.cache_config.num_gpu_blocks = NUM_BLOCKS
        hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.block_hasher = get_request_block_hasher(BLOCK, hash_fn)
        shape = {"block_size": BLOCK, "num_kv_heads": HEADS, "head_size": HEAD, "dtype": torch.float32}
        groups = [
            KVCacheGroupSpec([LAYERS[0]], SlidingWindowSpec(sliding_window=WINDOW, **shape)),
            KVCacheGroupSpec([LAYERS[1]], FullAttentionSpec(**shape)),
        ]
        kv_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=groups)
        self.scheduler = Scheduler(
            vllm_config=config,
            kv_cache_config=kv_config,
            structured_output_manager=StructuredOutputManager(config),
            block_size=BLOCK,
            log_stats=True,
        )
        self.worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
        self.caches = {n: torch.full((NUM_BLOCKS, HEADS, BLOCK, 2 * HEAD), float("nan")) for n in LAYERS}
        self.worker.register_kv_caches(self.caches)
        self.matched: list[int] = []
        lookup = self.scheduler.connector.get_num_new_matched_tokens

        def recorded(request: Request, computed: int) -> tuple[int | None, bool]:
            out = lookup(request, computed)
            self.matched.append(out[0] or 0)
            return out

        self.scheduler.connector.get_num_new_matched_tokens = recorded
        self.block_ids: dict[str, list[list[int]]] = {}
        self.loads: list[tuple[int, int]] = []  # (group, block id) of every object loaded
        self.failed_recving: set[str] = set()
        self.window_saved: dict[int, bytes] = {}  # window-group block's seq hash -> bytes when saved
        self.window_missing_after_save = 0
        self.before_load = lambda: None

    def run(self, request_id: str, prompt: list[int]) -> None:
        request = Request(
            request_id, prompt, SamplingParams(max_tokens=2), None, block_hasher=self.block_hasher
        )
        self.scheduler.add_request(request)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.scheduler.has_requests() and not self.scheduler.finished_req_ids:
                return
            if not self.step(request_id, prompt):
                time.sleep(0.005)
        raise RuntimeError("the request did not finish")

    def step(self, req_id: str, prompt: list[int]) -> bool:
        out = self.scheduler.schedule()
        meta = out.kv_connector_metadata
        for move in meta.loads + meta.async_loads:
            self.loads += list(zip(move.groups, move.block_ids, strict=True))
        self.worker.bind_connector_metadata(meta)
        self.before_load()
        self.worker.start_load_kv(None)
        for new in out.scheduled_new_reqs:
            self.block_ids[new.req_id] = [list(ids) for ids in new.block_ids]
        cached = out.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            for g, ids in enumerate(cached.new_block_ids[i] or []):
                self.block_ids[rid][g].extend(ids)
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
        connector_output = KVConnectorOutput(
            finished_sending=results.finished_sending or None,
            finished_recving=results.finished_recving or None,
            invalid_block_ids=errors,
            failed_recving=results.failed_recving,
        )
        result = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[7] for _ in ids],
            kv_connector_output=connector_output,
        )
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
    store = c.worker.link.get()
    seqs, digests = c.worker.names.prompt(prompt_b)
    doomed = c.worker.names.key(seqs[3], digests[3], 0, 0, c.worker.groups.members(0))

    def remove_once() -> None:
        if not (c.scheduler.connector.scheduler_side.requests and store.batch_exists([doomed])[0]):
            return
        until = time.monotonic() + 60
        while True:
            try:
                return store.remove(doomed)
            except ObjectBusyError:  # B's read lease has not lapsed yet
                if time.monotonic() > until:
                    raise
                time.sleep(0.2)

    c.before_load = remove_once
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
