"""Real vLLM scheduler + worker-side connector, two "instances" sharing one kvstore (KVSTORE_MASTER).

Instance A runs a request with a 4-block prompt and saves it. A fresh instance B (its own Scheduler,
its own worker connector and KV tensors) gets a prompt sharing A's first 3 blocks. Printed as JSON:
what get_num_new_matched_tokens returned, which blocks B loaded, and whether B's loaded KV equals
what A saved, byte for byte. Runs in the engines tier's virtual environment (tests/engines/setup_env.sh).

The model forward is the one thing simulated: each step writes, for every token it computes, a value
derived from (token id, position, layer) into that token's slot of every layer, as attention would.
"""

from __future__ import annotations

import json
import sys

import torch
from llm_common import llama_config, temp_model_dir
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm_common import (
    add_request,
    connector_config,
    real_scheduler,
    record_matches,
    request_block_hasher,
    step_until_done,
    worker_output,
)

BLOCK = 16
HEADS, HEAD = 2, 32
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
NUM_BLOCKS = 64


def tiny_model_dir() -> str:
    config = llama_config(hidden=HEADS * HEAD * 2, heads=4, kv_heads=HEADS, head_dim=HEAD, layers=len(LAYERS))
    return temp_model_dir("kvstore-tiny-llama-", config)


class Instance:
    """One vLLM instance: its scheduler (which builds the scheduler-side connector itself) and one worker
    (the worker-side connector over real KV tensors in vLLM's CPU layout)."""

    def __init__(self, model: str) -> None:
        config = connector_config(model, BLOCK, NUM_BLOCKS)
        self.block_hasher = request_block_hasher(config, BLOCK)
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=torch.float32)
        kv_config = KVCacheConfig(
            num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(LAYERS, spec)]
        )
        self.scheduler = real_scheduler(config, kv_config, BLOCK)
        self.worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
        # vLLM's CPU attention layout: [blocks, kv heads, block tokens, K|V]; NaN marks "never written".
        self.caches = {n: torch.full((NUM_BLOCKS, HEADS, BLOCK, 2 * HEAD), float("nan")) for n in LAYERS}
        self.worker.register_kv_caches(self.caches)
        self.matched = record_matches(self.scheduler)
        self.loaded: list[str] = []
        self.block_ids: dict[str, list[int]] = {}

    def run(self, request_id: str, prompt: list[int]) -> None:
        add_request(self.scheduler, request_id, prompt, 1, self.block_hasher)
        step_until_done(self.scheduler, self.step, 60)

    def step(self) -> bool:
        out = self.scheduler.schedule()
        meta = out.kv_connector_metadata
        self.loaded += [s for move in meta.loads for s in move.seqs]
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        positions = {}
        for new in out.scheduled_new_reqs:
            self.block_ids[new.req_id] = list(new.block_ids[0])
            positions[new.req_id] = (new.prompt_token_ids, new.num_computed_tokens)
        for layer_index, name in enumerate(LAYERS):
            self.worker.wait_for_layer_load(name)
            for req_id, (tokens, start) in positions.items():
                end = start + out.num_scheduled_tokens[req_id]
                self.compute(name, layer_index, self.block_ids[req_id], tokens, start, min(end, len(tokens)))
            self.worker.save_kv_layer(name, self.caches[name], None)
        self.worker.wait_for_save()
        ids = list(out.num_scheduled_tokens)
        result = worker_output(self.worker, out.finished_req_ids, ids)
        self.scheduler.update_from_output(out, result)
        return bool(ids)

    def compute(
        self, name: str, layer: int, blocks: list[int], tokens: list[int], start: int, end: int
    ) -> None:
        for pos in range(start, end):
            value = float(tokens[pos] * 1000 + pos) + layer / 10
            self.caches[name][blocks[pos // BLOCK], :, pos % BLOCK, :] = value

    def block_bytes(self, req_id: str, count: int) -> list[bytes]:
        return [
            b"".join(self.caches[n][b].numpy().tobytes() for n in LAYERS)
            for b in self.block_ids[req_id][:count]
        ]


def main() -> None:
    model = tiny_model_dir()
    prompt_a = [(i * 7 + 3) % 500 + 5 for i in range(4 * BLOCK)]  # exactly 4 full blocks
    prompt_b = prompt_a[: 3 * BLOCK] + [(i * 11 + 1) % 500 + 5 for i in range(BLOCK + 5)]
    a = Instance(model)
    a.run("a", prompt_a)
    saved = a.block_bytes("a", 4)
    stats_a = a.worker.mover.take_stats()
    b = Instance(model)
    b.run("b", prompt_b)
    loaded = b.block_bytes("b", 3)
    stats_b = b.worker.mover.take_stats()
    print(
        json.dumps(
            {
                "a_matched": a.matched,
                "a_saved_blocks": stats_a.saved_blocks,
                "b_matched": b.matched,
                "b_loaded_keys": len(b.loaded),
                "b_loaded_blocks": stats_b.loaded_blocks,
                "b_failed_loads": stats_b.failed_loads,
                "b_saved_blocks": stats_b.saved_blocks,
                "equal_bytes": loaded == saved[:3],
                "nan_in_loaded": any(
                    bool(torch.isnan(a.caches[n][blk]).any()) for n in LAYERS for blk in a.block_ids["a"][:3]
                )
                or any(
                    bool(torch.isnan(b.caches[n][blk]).any()) for n in LAYERS for blk in b.block_ids["b"][:3]
                ),
                "b_unfinished": b.scheduler.get_num_unfinished_requests(),
            }
        )
    )
    sys.stdout.flush()
    a.worker.shutdown()
    b.worker.shutdown()


if __name__ == "__main__":
    main()
