"""One stored layout for every TP size (issue 40 item 2), through vLLM's real connector.

A writer "instance" at TP=2 (its real Scheduler, which builds the scheduler-side connector, and one real
worker-side KVStoreConnector per TP rank, each over KV tensors that vLLM's own allocate_kv_cache makes for
that rank's KV heads in the CPU backend's LBHNC layout) runs a 4-block prompt and saves it. Fresh readers at
TP=1, 2, 4 and 8 (4 KV heads: at TP=8 each head is on two ranks) then run a prompt sharing its first 3
blocks. Ranks are emulated in one process: a VllmConfig per rank with tensor_parallel_size and rank set,
their outputs merged by vLLM's KVOutputAggregator.

Then the same under the connector's head_split=2 setting (2 members per block instead of 4): a TP=1
reader with it finds none of the default split's members of that prompt; a TP=2 writer of another prompt
stores exactly members #0of2 and #1of2 of each block (no #<i>of4); TP=1 and TP=2 readers with the setting
read them byte-exact, each rank its heads' share; a reader with the default split finds none of them; and
TP=4, whose ranks would each read half a member, is refused at construction on both roles.

The model forward is the one thing simulated: each step writes, for every token it computes, a value
derived from (token, position, layer, global KV head, element, instance) into that token's slot of each
of the rank's heads, so a reader's block equals the writer's only if it was loaded. Printed as JSON: what
each reader's scheduler matched, whether each reader's loaded blocks equal the writer's for the same
global heads byte for byte, and each rank's loaded/saved bytes beside its heads' share.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch
from llm_common import llama_config, temp_model_dir
from vllm.config import VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.attention.backends.utils import record_kv_cache_layout
from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config, get_kv_cache_configs
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.kv_cache_layout import KVCacheLayout
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.worker.utils import allocate_kv_cache
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
KV_HEADS, HEAD = 4, 32
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
NUM_BLOCKS = 64
CONTENT = 2 * HEAD  # K|V values of one token and head (vLLM 0.32's C axis)


def tiny_model_dir() -> str:
    config = llama_config(
        hidden=8 * HEAD, heads=8, kv_heads=KV_HEADS, head_dim=HEAD, layers=len(LAYERS), max_positions=512
    )
    return temp_model_dir("kvstore-tiny-llama-tp-", config)


def rank_config(model: str, tp: int, rank: int, extra: dict[str, object] | None = None) -> VllmConfig:
    config = connector_config(model, BLOCK, NUM_BLOCKS, extra=extra, tp=tp, rank=rank)
    record_kv_cache_layout(config.cache_config, KVCacheLayout.LBHNC.name)  # the CPU backend's only one
    return config


def global_heads(rank: int, tp: int) -> list[int]:
    """The KV heads vLLM's QKVParallelLinear gives TP rank `rank` (replicated when tp > KV_HEADS)."""
    if tp > KV_HEADS:
        return [rank // (tp // KV_HEADS)]
    per = KV_HEADS // tp
    return list(range(rank * per, (rank + 1) * per))


def kv_cache_configs(configs: list[VllmConfig]) -> list[object]:
    """Each rank's KV cache config, as a worker of this TP size reports its layers: KV heads of its own
    shard only."""
    tp = len(configs)
    spec = FullAttentionSpec(
        block_size=BLOCK, num_kv_heads=len(global_heads(0, tp)), head_size=HEAD, dtype=torch.float32
    )
    specs = [{name: spec for name in LAYERS} for _ in range(tp)]
    return get_kv_cache_configs(configs[0], specs, [NUM_BLOCKS * len(LAYERS) * spec.page_size_bytes] * tp)


class Instance:
    """One vLLM instance at TP size `tp`: its scheduler and one worker-side connector per TP rank."""

    def __init__(self, model: str, tp: int, salt: float, extra: dict[str, object] | None = None) -> None:
        self.tp = tp
        self.salt = salt  # in every value it computes: a block it computed itself is not the writer's
        configs = [rank_config(model, tp, r, extra) for r in range(tp)]
        self.block_hasher = request_block_hasher(configs[0], BLOCK)
        kv_configs = kv_cache_configs(configs)
        self.scheduler = real_scheduler(configs[0], generate_scheduler_kv_cache_config(kv_configs), BLOCK)
        self.workers = [
            KVConnectorFactory.create_connector(configs[r], KVConnectorRole.WORKER, kv_configs[r])
            for r in range(tp)
        ]
        self.caches = [
            allocate_kv_cache(kv_configs[r], torch.device("cpu"), KVCacheLayout.LBHNC) for r in range(tp)
        ]
        for worker, caches in zip(self.workers, self.caches, strict=True):
            for cache in caches.values():
                cache.fill_(float("nan"))  # "never written"
            worker.register_kv_caches(caches)
        self.aggregator = KVOutputAggregator(tp)
        self.matched = record_matches(self.scheduler)
        self.block_ids: dict[str, list[int]] = {}
        self.stats = [dict[str, float]() for _ in range(tp)]

    def run(self, request_id: str, prompt: list[int]) -> None:
        add_request(self.scheduler, request_id, prompt, 1, self.block_hasher)
        step_until_done(self.scheduler, self.step, 120)

    def step(self) -> bool:
        out = self.scheduler.schedule()
        for new in out.scheduled_new_reqs:
            self.block_ids[new.req_id] = list(new.block_ids[0])
        outputs = [self.rank_step(rank, out) for rank in range(self.tp)]
        result = self.aggregator.aggregate(outputs)
        assert result is not None
        self.scheduler.update_from_output(out, result)
        return bool(out.num_scheduled_tokens)

    def rank_step(self, rank: int, out: object) -> ModelRunnerOutput:
        """One TP rank's part of a step, as vLLM's worker runs it around the forward pass."""
        worker, caches = self.workers[rank], self.caches[rank]
        worker.bind_connector_metadata(out.kv_connector_metadata)
        worker.start_load_kv(None)
        for layer, name in enumerate(LAYERS):
            worker.wait_for_layer_load(name)
            for new in out.scheduled_new_reqs:
                start = new.num_computed_tokens
                end = min(start + out.num_scheduled_tokens[new.req_id], len(new.prompt_token_ids))
                self.compute(rank, caches[name], layer, new.req_id, new.prompt_token_ids, start, end)
            worker.save_kv_layer(name, caches[name], None)
        worker.wait_for_save()
        ids = list(out.num_scheduled_tokens)
        output = worker_output(worker, out.finished_req_ids, ids)
        stats = worker.get_kv_connector_stats()
        for key, value in (stats.data if stats is not None else {}).items():
            self.stats[rank][key] = self.stats[rank].get(key, 0) + value
        return output

    def compute(
        self, rank: int, cache: torch.Tensor, layer: int, req_id: str, tokens: list[int], start: int, end: int
    ) -> None:
        blocks = self.block_ids[req_id]
        for pos in range(start, end):
            for local, head in enumerate(global_heads(rank, self.tp)):
                base = float(tokens[pos] * 1000 + pos) + layer / 10 + head / 100 + self.salt
                cache[blocks[pos // BLOCK], local, pos % BLOCK, :] = base + torch.arange(CONTENT) / 1e4

    def head_bytes(self, req_id: str, count: int) -> dict[tuple[int, int, int], bytes]:
        """{(block position, layer, global head): that head's bytes of the block} over every rank."""
        out = {}
        for rank in range(self.tp):
            for layer, name in enumerate(LAYERS):
                for local, head in enumerate(global_heads(rank, self.tp)):
                    for i, block in enumerate(self.block_ids[req_id][:count]):
                        data = self.caches[rank][name][block, local].contiguous().numpy().tobytes()
                        assert out.setdefault((i, layer, head), data) == data, "replicas differ"
        return out

    def shutdown(self) -> None:
        for worker in self.workers:
            worker.shutdown()


def head_share(tp: int, blocks: int) -> int:
    """Bytes of `blocks` blocks of every layer for one rank's heads."""
    return blocks * len(LAYERS) * len(global_heads(0, tp)) * BLOCK * CONTENT * 4


def stored_members(instance: Instance, prompt: list[int], count: int) -> list[bool]:
    """Whether member i of `count` of each full block of `prompt` is in the store (block-major)."""
    connector = instance.scheduler.connector
    seqs, digests = connector.names.prompt(prompt)
    keys = [
        connector.names.key(seq, digest, 0, member, count)
        for seq, digest in zip(seqs, digests, strict=True)
        for member in range(count)
    ]
    return connector.link.get().batch_exists(keys)


def refusals(model: str, tp: int, extra: dict[str, object]) -> dict[str, str]:
    """How each role's connector construction answers a head split TP size `tp` cannot read whole."""
    configs = [rank_config(model, tp, r, extra) for r in range(tp)]
    kv_configs = kv_cache_configs(configs)
    out = {}
    for role, rank in ((KVConnectorRole.SCHEDULER, 0), (KVConnectorRole.WORKER, tp - 1)):
        try:
            KVConnectorFactory.create_connector(configs[rank], role, kv_configs[rank]).shutdown()
            out[role.name] = "constructed"
        except Exception as exc:  # the test checks which error and what it says
            out[role.name] = f"{type(exc).__name__}: {exc}"
    return out


def head_split_case(model: str, prompt_a: list[int]) -> dict[str, object]:
    """The head_split=2 deployment (module docstring): 2 members of 2 KV heads each per block."""
    split = {"head_split": 2}
    report: dict[str, object] = {}
    probe = Instance(model, 1, salt=0.75, extra=split)
    probe.run("p", prompt_a[: 3 * BLOCK] + [(i * 5 + 2) % 500 + 5 for i in range(BLOCK)])
    report["probe_matched"] = probe.matched  # the default split's members of prompt_a are not read
    probe.shutdown()
    prompt_c = [(i * 13 + 1) % 500 + 5 for i in range(4 * BLOCK)]
    writer = Instance(model, 2, salt=0.25, extra=split)
    writer.run("c", prompt_c)
    written = writer.head_bytes("c", 3)
    report["writer_saved_bytes"] = [s.get("saved_bytes", 0) for s in writer.stats]
    report["writer_share"] = head_share(2, 4)
    report["members_of_2"] = stored_members(writer, prompt_c, 2)
    report["members_of_4"] = stored_members(writer, prompt_c, 4)
    writer.shutdown()
    for tp in (1, 2):
        reader = Instance(model, tp, salt=0.5, extra=split)
        reader.run("d", prompt_c[: 3 * BLOCK] + [(i * 17 + tp) % 500 + 5 for i in range(BLOCK + 3)])
        loaded = reader.head_bytes("d", 3)
        report[f"tp{tp}"] = {
            "matched": reader.matched,
            "equal_bytes": loaded == written,
            "loaded_bytes": [s.get("loaded_bytes", 0) for s in reader.stats],
            "failed_loads": [s.get("failed_loads", 0) for s in reader.stats],
            "share": head_share(tp, 3),
        }
        reader.shutdown()
    default = Instance(model, 1, salt=0.5)
    default.run("e", prompt_c[: 3 * BLOCK] + [(i * 19 + 3) % 500 + 5 for i in range(BLOCK)])
    report["default_split_matched"] = default.matched  # split-2 members are not the default's
    default.shutdown()
    report["tp4_refused"] = refusals(model, 4, split)
    return report


def main_head_split() -> None:
    """The head_split=2 case alone (argument `head_split`), after a default-split writer of prompt_a."""
    model = tiny_model_dir()
    prompt_a = [(i * 7 + 3) % 500 + 5 for i in range(4 * BLOCK)]
    writer = Instance(model, 2, salt=0.0)
    writer.run("a", prompt_a)
    writer.shutdown()
    print(json.dumps({"split2": head_split_case(model, prompt_a)}))
    sys.stdout.flush()


def main() -> None:
    model = tiny_model_dir()
    prompt_a = [(i * 7 + 3) % 500 + 5 for i in range(4 * BLOCK)]  # exactly 4 full blocks
    writer = Instance(model, 2, salt=0.0)
    writer.run("a", prompt_a)
    written = writer.head_bytes("a", 3)
    report: dict[str, object] = {
        "writer_matched": writer.matched,
        "writer_saved_bytes": [s.get("saved_bytes", 0) for s in writer.stats],
        "writer_share": head_share(2, 4),
    }
    writer.shutdown()
    for tp in (1, 2, 4, 8):
        reader = Instance(model, tp, salt=0.5)
        # 3 blocks shared with the writer; the rest its own (readers store their 4th block too)
        reader.run("b", prompt_a[: 3 * BLOCK] + [(i * 11 + tp) % 500 + 5 for i in range(BLOCK + 5)])
        loaded = reader.head_bytes("b", 3)
        report[f"tp{tp}"] = {
            "matched": reader.matched,
            "equal_bytes": loaded == written,
            "nan_in_loaded": any(np.isnan(np.frombuffer(data, np.float32)).any() for data in loaded.values()),
            "loaded_bytes": [s.get("loaded_bytes", 0) for s in reader.stats],
            "failed_loads": [s.get("failed_loads", 0) for s in reader.stats],
            "share": head_share(tp, 3),
            "unfinished": reader.scheduler.get_num_unfinished_requests(),
        }
        reader.shutdown()
    print(json.dumps(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main_head_split() if sys.argv[1:] == ["head_split"] else main()
