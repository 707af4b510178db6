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

import torch
from vllm.config import VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.outputs import ModelRunnerOutput
from vllm_common import (
    SAMPLED_TOKEN,
    add_request,
    computed_tokens,
    connector_config,
    real_scheduler,
    record_matches,
    request_block_hasher,
    step_until_done,
    track_group_blocks,
    worker_output,
)
from vllm_mamba_scheduler import (
    BLOCK,
    LAYERS,
    NUM_BLOCKS,
    STATE_BYTES,
    UNWRITTEN,
    full_and_state_groups,
    state_of,
)
from vllm_scheduler import HEAD, HEADS, tiny_model_dir


def rank_config(model: str, tp: int, rank: int) -> VllmConfig:
    config = connector_config(model, BLOCK, NUM_BLOCKS, tp=tp, rank=rank)
    config.cache_config.mamba_cache_mode = "align"
    return config


class Instance:
    """One instance at TP size `tp`: its scheduler and a worker-side connector per rank."""

    def __init__(self, model: str, tp: int) -> None:
        self.tp = tp
        configs = [rank_config(model, tp, r) for r in range(tp)]
        self.block_hasher = request_block_hasher(configs[0], BLOCK)
        kv_config = full_and_state_groups(HEADS // tp)
        self.scheduler = real_scheduler(configs[0], kv_config, BLOCK)
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
        self.matched = record_matches(self.scheduler)
        self.block_ids: dict[str, list[list[int]]] = {}
        self.tokens: dict[str, list[int]] = {}
        self.targets: dict[str, list[int]] = {}  # request -> state blocks its load writes
        self.loaded: dict[int, list[bytes]] = {}  # rank -> its state blocks' bytes when its load ended

    def run(self, request_id: str, prompt: list[int]) -> None:
        self.tokens[request_id] = list(prompt)
        add_request(self.scheduler, request_id, prompt, 2, self.block_hasher)
        step_until_done(self.scheduler, self.step, 120)

    def step(self) -> bool:
        out = self.scheduler.schedule()
        for move in out.kv_connector_metadata.async_loads:
            self.targets[move.req_id] = [
                b for g, b in zip(move.groups, move.block_ids, strict=True) if g == 1
            ]
        track_group_blocks(out, self.block_ids)
        outputs = [self.rank_step(rank, out) for rank in range(self.tp)]
        for rid, count in out.num_scheduled_tokens.items():
            if computed_tokens(out, rid) + count >= len(self.tokens[rid]):
                self.tokens[rid].append(SAMPLED_TOKEN)
        self.scheduler.update_from_output(out, self.aggregator.aggregate(outputs))
        return bool(out.num_scheduled_tokens)

    def rank_step(self, rank: int, out) -> ModelRunnerOutput:
        worker, caches = self.workers[rank], self.caches[rank]
        worker.bind_connector_metadata(out.kv_connector_metadata)
        worker.start_load_kv(None)
        worker.wait_for_layer_load(LAYERS[0])
        for rid, count in out.num_scheduled_tokens.items():
            start = computed_tokens(out, rid)
            end = start + count
            tokens, (full_ids, state_ids) = self.tokens[rid], self.block_ids[rid]
            for pos in range(start, min(end, len(tokens))):
                caches[LAYERS[0]][full_ids[pos // BLOCK], :, pos % BLOCK, :] = tokens[pos] * 1000 + pos + rank
            caches[LAYERS[1]][state_ids[(end + BLOCK - 1) // BLOCK - 1]] = state_of([*tokens[:end], rank])
        worker.wait_for_save()
        ids = list(out.num_scheduled_tokens)
        output = worker_output(worker, out.finished_req_ids, ids)
        for rid in output.kv_connector_output.finished_recving or ():
            self.loaded[rank] = [caches[LAYERS[1]][b].numpy().tobytes() for b in self.targets.get(rid, [])]
        return output


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
