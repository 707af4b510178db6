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
import os
import sys
import tempfile
import time

import torch
from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

BLOCK = 16
HEADS, HEAD = 2, 32
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
NUM_BLOCKS = 64


def tiny_model_dir() -> str:
    path = tempfile.mkdtemp(prefix="kvstore-tiny-llama-")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HEADS * HEAD * 2,
        "intermediate_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": HEADS,
        "head_dim": HEAD,
        "num_hidden_layers": len(LAYERS),
        "vocab_size": 512,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


class Instance:
    """One vLLM instance: its scheduler (which builds the scheduler-side connector itself) and one worker
    (the worker-side connector over real KV tensors in vLLM's CPU layout)."""

    def __init__(self, model: str) -> None:
        config = VllmConfig(
            model_config=ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32", seed=0),
            cache_config=CacheConfig(block_size=BLOCK),
            kv_transfer_config=KVTransferConfig(
                kv_connector="KVStoreConnector",
                kv_connector_module_path="kvstore.integrations.vllm",
                kv_role="kv_both",
                kv_connector_extra_config={},  # master from KVSTORE_MASTER
            ),
        )
        config.cache_config.num_gpu_blocks = NUM_BLOCKS
        hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)  # as vLLM's engine core does
        self.block_hasher = get_request_block_hasher(BLOCK, hash_fn)
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=torch.float32)
        kv_config = KVCacheConfig(
            num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(LAYERS, spec)]
        )
        self.scheduler = Scheduler(
            vllm_config=config,
            kv_cache_config=kv_config,
            structured_output_manager=StructuredOutputManager(config),
            block_size=BLOCK,
            log_stats=True,
        )
        self.worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
        # vLLM's CPU attention layout: [blocks, kv heads, block tokens, K|V]; NaN marks "never written".
        self.caches = {n: torch.full((NUM_BLOCKS, HEADS, BLOCK, 2 * HEAD), float("nan")) for n in LAYERS}
        self.worker.register_kv_caches(self.caches)
        self.matched: list[int] = []
        lookup = self.scheduler.connector.get_num_new_matched_tokens

        def recorded(request: Request, computed: int) -> tuple[int | None, bool]:
            out = lookup(request, computed)
            self.matched.append(out[0] or 0)
            return out

        self.scheduler.connector.get_num_new_matched_tokens = recorded
        self.loaded: list[str] = []
        self.block_ids: dict[str, list[int]] = {}

    def run(self, request_id: str, prompt: list[int]) -> None:
        request = Request(
            request_id, prompt, SamplingParams(max_tokens=1), None, block_hasher=self.block_hasher
        )
        self.scheduler.add_request(request)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.scheduler.has_requests() and not self.scheduler.finished_req_ids:
                return
            if not self.step():
                time.sleep(0.005)  # only waiting for saves to finish, as vLLM's busy loop does
        raise RuntimeError("the request did not finish")

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
        sending, receiving = self.worker.get_finished(out.finished_req_ids)
        errors = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        ids = list(out.num_scheduled_tokens)
        result = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[7] for _ in ids],
            kv_connector_output=KVConnectorOutput(
                finished_sending=sending, finished_recving=receiving, invalid_block_ids=errors
            ),
        )
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
