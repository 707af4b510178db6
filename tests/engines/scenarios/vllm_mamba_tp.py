"""A sharded Mamba state across TP ranks, through vLLM's real Scheduler and one real worker-side connector per
TP rank (ranks emulated in one process, their outputs merged by vLLM's KVOutputAggregator), with a
full-attention group (2 KV heads) and a Mamba state group in "align" mode:

- a writer at TP=2 runs a 6-block + 5-token prompt: each rank writes its own state shard (one member per
  rank) and its KV head of the full-attention blocks;
- a fresh reader at TP=2 sharing 6 blocks is credited 96 tokens and each rank loads its own shard of the
  state at block 5, byte-exact, into the block vLLM allocated;
- a fresh reader at TP=1 is credited nothing: the attention blocks are there for every TP size, but a rank's
  state shard is readable only at the writer's TP size (its key names it), so no hit has its state.

The forward is simulated as in vllm_mamba_scheduler.py, each rank's state a function of (prefix, rank).
Prints one JSON object.
"""

from __future__ import annotations

import json
import time

import torch
from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager
from vllm_mamba_scheduler import BLOCK, CONV, LAYERS, NUM_BLOCKS, SSM, STATE_BYTES, UNWRITTEN, state_of
from vllm_scheduler import HEAD, HEADS, tiny_model_dir


def rank_config(model: str, tp: int, rank: int) -> VllmConfig:
    config = VllmConfig(
        model_config=ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32", seed=0),
        cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True),
        parallel_config=ParallelConfig(tensor_parallel_size=tp, rank=rank),
        kv_transfer_config=KVTransferConfig(
            kv_connector="KVStoreConnector",
            kv_connector_module_path="kvstore.integrations.vllm",
            kv_role="kv_both",
            kv_connector_extra_config={},
        ),
    )
    config.cache_config.num_gpu_blocks = NUM_BLOCKS
    config.cache_config.mamba_cache_mode = "align"
    return config


class Instance:
    """One instance at TP size `tp`: its scheduler and a worker-side connector per rank."""

    def __init__(self, model: str, tp: int) -> None:
        self.tp = tp
        configs = [rank_config(model, tp, r) for r in range(tp)]
        hash_fn = get_hash_fn_by_name(configs[0].cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.block_hasher = get_request_block_hasher(BLOCK, hash_fn)
        full = FullAttentionSpec(
            block_size=BLOCK, num_kv_heads=HEADS // tp, head_size=HEAD, dtype=torch.float32
        )
        mamba = MambaSpec(
            block_size=BLOCK,
            shapes=(CONV, SSM),
            dtypes=(torch.float32, torch.float32),
            mamba_cache_mode="align",
        )
        groups = [KVCacheGroupSpec([LAYERS[0]], full), KVCacheGroupSpec([LAYERS[1]], mamba)]
        kv_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=groups)
        self.scheduler = Scheduler(
            vllm_config=configs[0],
            kv_cache_config=kv_config,
            structured_output_manager=StructuredOutputManager(configs[0]),
            block_size=BLOCK,
            log_stats=True,
        )
        self.workers = [
            KVConnectorFactory.create_connector(c, KVConnectorRole.WORKER, kv_config) for c in configs
        ]
        self.caches = [
            {
                LAYERS[0]: torch.full((NUM_BLOCKS, HEADS // tp, BLOCK, 2 * HEAD), float("nan")),
                LAYERS[1]: torch.full((NUM_BLOCKS, 1, 1, STATE_BYTES), UNWRITTEN, dtype=torch.int8),
            }
            for _ in range(tp)
        ]
        for worker, caches in zip(self.workers, self.caches, strict=True):
            worker.register_kv_caches(caches)
        self.aggregator = KVOutputAggregator(tp)
        self.matched: list[int] = []
        lookup = self.scheduler.connector.get_num_new_matched_tokens

        def recorded(request: Request, computed: int) -> tuple[int | None, bool]:
            out = lookup(request, computed)
            self.matched.append(out[0] or 0)
            return out

        self.scheduler.connector.get_num_new_matched_tokens = recorded
        self.block_ids: dict[str, list[list[int]]] = {}
        self.tokens: dict[str, list[int]] = {}
        self.targets: dict[str, list[int]] = {}  # request -> state blocks its load writes
        self.loaded: dict[int, list[bytes]] = {}  # rank -> its state blocks' bytes when its load ended

    def run(self, request_id: str, prompt: list[int]) -> None:
        request = Request(
            request_id, prompt, SamplingParams(max_tokens=2), None, block_hasher=self.block_hasher
        )
        self.tokens[request_id] = list(prompt)
        self.scheduler.add_request(request)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if not self.scheduler.has_requests() and not self.scheduler.finished_req_ids:
                return
            out = self.scheduler.schedule()
            for move in out.kv_connector_metadata.async_loads:
                self.targets[move.req_id] = [
                    b for g, b in zip(move.groups, move.block_ids, strict=True) if g == 1
                ]
            for new in out.scheduled_new_reqs:
                self.block_ids[new.req_id] = [list(ids) for ids in new.block_ids]
            for i, rid in enumerate(out.scheduled_cached_reqs.req_ids):
                for g, ids in enumerate(out.scheduled_cached_reqs.new_block_ids[i] or []):
                    self.block_ids[rid][g].extend(ids)
            outputs = [self.rank_step(rank, out) for rank in range(self.tp)]
            for rid, count in out.num_scheduled_tokens.items():
                if self.computed(out, rid) + count >= len(self.tokens[rid]):
                    self.tokens[rid].append(7)
            result = self.aggregator.aggregate(outputs)
            self.scheduler.update_from_output(out, result)
            if not out.num_scheduled_tokens:
                time.sleep(0.005)
        raise RuntimeError("the request did not finish")

    @staticmethod
    def computed(out, req_id: str) -> int:
        for new in out.scheduled_new_reqs:
            if new.req_id == req_id:
                return new.num_computed_tokens
        cached = out.scheduled_cached_reqs
        return cached.num_computed_tokens[cached.req_ids.index(req_id)]

    def rank_step(self, rank: int, out) -> ModelRunnerOutput:
        worker, caches = self.workers[rank], self.caches[rank]
        worker.bind_connector_metadata(out.kv_connector_metadata)
        worker.start_load_kv(None)
        worker.wait_for_layer_load(LAYERS[0])
        for rid, count in out.num_scheduled_tokens.items():
            start = self.computed(out, rid)
            end = start + count
            tokens, (full_ids, state_ids) = self.tokens[rid], self.block_ids[rid]
            for pos in range(start, min(end, len(tokens))):
                caches[LAYERS[0]][full_ids[pos // BLOCK], :, pos % BLOCK, :] = tokens[pos] * 1000 + pos + rank
            caches[LAYERS[1]][state_ids[(end + BLOCK - 1) // BLOCK - 1]] = state_of([*tokens[:end], rank])
        worker.wait_for_save()
        sending, receiving = worker.get_finished(out.finished_req_ids)
        for rid in receiving or ():
            self.loaded[rank] = [caches[LAYERS[1]][b].numpy().tobytes() for b in self.targets.get(rid, [])]
        errors = worker.get_block_ids_with_load_errors()
        worker.clear_connector_metadata()
        ids = list(out.num_scheduled_tokens)
        return ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[7] for _ in ids],
            kv_connector_output=KVConnectorOutput(
                finished_sending=sending, finished_recving=receiving, invalid_block_ids=errors
            ),
        )


def main() -> None:
    model = tiny_model_dir()
    prompt_a = [(i * 7 + 3) % 500 + 5 for i in range(6 * BLOCK + 5)]
    prompt_b = prompt_a[: 6 * BLOCK] + [(i * 11 + 1) % 500 + 5 for i in range(BLOCK + 3)]
    writer = Instance(model, 2)
    writer.run("w", prompt_a)
    reader = Instance(model, 2)
    reader.run("r2", prompt_b)
    single = Instance(model, 1)
    single.run("r1", prompt_b)
    worker = single.workers[0]
    seqs, digests = worker.names.prompt(prompt_b)
    members = worker.groups.members(0)
    attention = [
        worker.names.key(seqs[i], digests[i], 0, m, members) for i in range(6) for m in range(members)
    ]
    expected = [state_of([*prompt_b[: 6 * BLOCK], rank]).numpy().tobytes() for rank in range(2)]
    print(
        json.dumps(
            {
                "writer_matched": writer.matched,
                "tp2_matched": reader.matched,
                "tp2_targets": [reader.block_ids["r2"][1].index(b) for b in reader.targets.get("r2", [])],
                "tp2_ranks_loaded_their_shard": [reader.loaded.get(r) == [expected[r]] for r in range(2)],
                "tp1_matched": single.matched,
                "tp1_sees_the_attention_blocks": all(worker.link.get().batch_exists(attention)),
            }
        )
    )


if __name__ == "__main__":
    main()
