"""kvstore's vLLM connector against vLLM 0.34's real classes (the CUDA wheel's Python, on CPU: no GPU is
needed to build the config and both connector roles): the KV cache access it declares, sleep mode's
unregister / restore of the KV memory, on real CPU tensors in vLLM's CPU layout, with the store of
KVSTORE_MASTER. Prints one JSON object (tests/engines/test_vllm_034.py checks it).

    python vllm034_memory.py [CONNECTOR_MODULE]      default kvstore.integrations.vllm
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import numpy as np
import torch
from llm_common import llama_config, temp_model_dir
from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, VllmConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

from kvstore.errors import KVStoreError
from kvstore.integrations.paged import Pieces

BLOCK, HEADS, HEAD = 32, 4, 64  # a layer's block: 4 heads x 32 tokens x (K|V of 64) x 4 bytes = 64 KiB
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]
NUM_BLOCKS = 64


def tiny_model_dir() -> str:
    config = llama_config(hidden=256, heads=4, kv_heads=HEADS, head_dim=HEAD, layers=len(LAYERS))
    return temp_model_dir("kvstore-tiny-llama-", config)


def vllm_config(module: str) -> VllmConfig:
    transfer = KVTransferConfig(
        kv_connector="KVStoreConnector", kv_connector_module_path=module, kv_role="kv_both"
    )
    return VllmConfig(
        model_config=ModelConfig(model=tiny_model_dir(), skip_tokenizer_init=True, dtype="float32", seed=0),
        cache_config=CacheConfig(block_size=BLOCK),
        kv_transfer_config=transfer,
        device_config=DeviceConfig(device="cpu"),  # 0.34's CPU platform wants triton-cpu; the config does not
    )


def pieces(caches: dict[str, torch.Tensor], blocks: list[int]) -> Pieces:
    """Each block's bytes in every layer, as the connector moves them."""
    addrs = [caches[n][b].data_ptr() for b in blocks for n in LAYERS]
    lengths = [caches[n][b].numel() * caches[n].element_size() for b in blocks for n in LAYERS]
    counts = [len(LAYERS)] * len(blocks)
    return Pieces(np.array(addrs, np.uint64), np.array(lengths, np.uint64), np.array(counts, np.int64))


def block_bytes(caches: dict[str, torch.Tensor], block: int) -> bytes:
    return b"".join(caches[n][block].numpy().tobytes() for n in LAYERS)


def read_into(store: Any, key: str, where: Pieces) -> str:
    """A store read of `key` into `where`: 'ok', the refusal's error type, or the failed result code."""
    try:
        result = store.batch_get_into_pieces([key], *where)[0]
    except KVStoreError as exc:
        return type(exc).__name__
    return "ok" if result > 0 else f"code {result}"


def config_checks(config: VllmConfig) -> dict[str, Any]:
    """What vLLM 0.34 asks the connector class before building it."""
    transfer = config.kv_transfer_config
    out: dict[str, Any] = {
        "access": transfer.kv_cache_access().name,
        "registers_kv_cache_memory": transfer.registers_kv_cache_memory(),
        "supports_sleep_mode": KVConnectorFactory.get_connector_class(transfer).supports_sleep_mode(transfer),
    }
    # vLLM's own check of a sleep-mode config (ModelConfig refuses enable_sleep_mode on a platform that
    # cannot sleep, as this CPU one: the flag is set after, and the connector's check run as VllmConfig does).
    config.model_config.enable_sleep_mode = True
    try:
        config._verify_kv_transfer_compat()
        out["vllm_sleep_mode_check"] = "accepted"
    except ValueError as exc:
        out["vllm_sleep_mode_check"] = str(exc)
    config.model_config.enable_sleep_mode = False
    return out


class Worker:
    """The worker-side connector driven through vLLM's calls, one block move at a time."""

    def __init__(self, module: str, connector: Any) -> None:
        self.module = importlib.import_module(module)
        self.c = connector
        tokens = [(i * 7 + 3) % 500 for i in range(NUM_BLOCKS * BLOCK)]
        self.seqs, self.digests = connector.names.prompt(tokens)  # the connector's names of the blocks

    def meta(self, req_id: str, pairs: list[tuple[int, int]], kind: str) -> Any:
        """Metadata moving prompt block i to/from block id b for each (i, b), in KV cache group 0."""
        move = self.module.BlockMove(req_id)
        for i, block_id in pairs:
            move.add(self.seqs[i], self.digests[i], 0, block_id)
        return self.module.KVStoreConnectorMetadata(**{kind: [move]})

    def save(self, req_id: str, pairs: list[tuple[int, int]]) -> None:
        self.c.bind_connector_metadata(self.meta(req_id, pairs, "saves"))
        self.c.wait_for_save()  # submitted; full-attention saves run after it returns
        self.c.clear_connector_metadata()

    def load(self, pairs: list[tuple[int, int]]) -> set[int]:
        """Block ids whose load failed."""
        self.c.bind_connector_metadata(self.meta("load", pairs, "loads"))
        self.c.start_load_kv(None)
        self.c.wait_for_layer_load(LAYERS[0])
        errors: set[int] = self.c.get_block_ids_with_load_errors()
        self.c.clear_connector_metadata()
        return errors


def sleep_and_wake(module: str, worker: Any) -> dict[str, Any]:
    """Sleep mode's calls around real CPU tensors in vLLM's CPU layout: [blocks, kv heads, tokens, K|V]."""
    out: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(0)
    caches = {n: torch.randn(NUM_BLOCKS, HEADS, BLOCK, 2 * HEAD, generator=gen) for n in LAYERS}
    worker.register_kv_caches(caches)
    w = Worker(module, worker)
    store = worker.link.get()  # the connector's own store client: what it registered is its own
    assert store is not None, f"no store: {worker.link.last_error}"
    key = f"vllm034-sleep/{os.getpid()}"
    store.batch_put_from_pieces([key], *pieces(caches, [1]))
    out["awake_read"] = read_into(store, key, pieces(caches, [2]))
    stored = {0: block_bytes(caches, 0), 1: block_bytes(caches, 1)}
    out["awake_round_trip"] = block_bytes(caches, 2) == stored[1]

    # A save of every block in flight when sleep comes: unregister_kv_caches returns after it ends.
    w.save("r", [(i, i) for i in range(NUM_BLOCKS)])
    worker.unregister_kv_caches()
    out["saves_done_at_unregister"] = worker.get_finished({"r"})[0] == {"r"}
    worker.unregister_kv_caches()  # idempotent

    canary = {b: block_bytes(caches, b) for b in (3, 5)}
    out["asleep_read"] = read_into(store, key, pieces(caches, [3]))
    out["asleep_load_errors"] = sorted(w.load([(0, 5)]))
    out["asleep_canary_intact"] = all(block_bytes(caches, b) == canary[b] for b in canary)

    # Wake-up with the KV tensors at new addresses (new pages); the old memory is no longer theirs.
    old = {
        n: torch.empty(0).set_(caches[n].untyped_storage(), 0, caches[n].shape, caches[n].stride())
        for n in LAYERS
    }
    for n in LAYERS:
        caches[n].set_(torch.zeros_like(old[n]))
    out["moved"] = all(caches[n].data_ptr() != old[n].data_ptr() for n in LAYERS)
    worker.restore_kv_caches()
    worker.restore_kv_caches()  # idempotent
    out["restored_read"] = read_into(store, key, pieces(caches, [2]))
    out["restored_load_errors"] = sorted(w.load([(0, 6)]))
    out["restored_round_trip"] = block_bytes(caches, 2) == stored[1] and block_bytes(caches, 6) == stored[0]
    out["old_memory_read"] = read_into(store, key, pieces(old, [2]))  # registered before sleep, not after
    return out


def main() -> None:
    module = sys.argv[1] if len(sys.argv) > 1 else "kvstore.integrations.vllm"
    config = vllm_config(module)
    out = config_checks(config)
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=torch.float32)
    kv_config = KVCacheConfig(
        num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(LAYERS, spec)]
    )
    scheduler = KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER, kv_config)
    worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
    out["roles"] = [scheduler.role.name, worker.role.name]
    scheduler.unregister_kv_caches()  # the scheduler holds no KV memory: both are no-ops there
    scheduler.restore_kv_caches()
    out.update(sleep_and_wake(module, worker))
    worker.shutdown()
    scheduler.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
