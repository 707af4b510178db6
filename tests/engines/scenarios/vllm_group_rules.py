"""The connector's per-group rules (kvstore.integrations.vllm_groups) against vLLM's own code, with vLLM's
real KV cache spec classes and single-type managers:

- for every spec kind the connector serves, its skipped-token rule equals the manager's
  get_num_skipped_tokens, and its longest hit over a set of present blocks equals the manager's
  find_longest_cache_hit over a block pool holding exactly those blocks (random patterns);
- kinds it does not serve (Mamba state, R-SWA, cross attention) have no rule, and a connector over a model
  with a Mamba group next to full attention counts no hit even when every full-attention block is stored,
  and plans no save.

Prints one JSON object.
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import torch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.core import single_type_kv_cache_manager as managers
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    CrossAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from vllm_common import CachedBlockPool, connector_config
from vllm_scheduler import tiny_model_dir

from kvstore.integrations.vllm_groups import longest_hit, rule_for_spec

BLOCK = 32
SHAPE = {"block_size": BLOCK, "num_kv_heads": 2, "head_size": 32, "dtype": torch.float32}
SERVED = {
    "full": (FullAttentionSpec(**SHAPE), managers.FullAttentionManager),
    "mla": (
        MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=64, dtype=torch.float32),
        managers.FullAttentionManager,
    ),
    "window": (SlidingWindowSpec(sliding_window=128, **SHAPE), managers.SlidingWindowManager),
    "window_odd": (SlidingWindowSpec(sliding_window=100, **SHAPE), managers.SlidingWindowManager),
    "chunked": (
        ChunkedLocalAttentionSpec(attention_chunk_size=64, **SHAPE),
        managers.ChunkedLocalAttentionManager,
    ),
}


def skipped_rule_agrees(spec, manager_class) -> bool:
    rule = rule_for_spec(spec)
    manager = SimpleNamespace(
        sliding_window=getattr(spec, "sliding_window", None),
        extra_retained_tokens=getattr(spec, "extra_retained_tokens", 0),
        attention_chunk_size=getattr(spec, "attention_chunk_size", None),
    )
    return all(
        rule.skipped_tokens(t) == manager_class.get_num_skipped_tokens(manager, t) for t in range(0, 2000, 7)
    )


def hits_agree(spec, manager_class, rng: random.Random, trials: int = 300) -> tuple[int, int]:
    """(trials where the hits agree, trials)."""
    rule = rule_for_spec(spec)
    agree = 0
    for _ in range(trials):
        blocks = rng.randint(1, 20)
        density = rng.random()
        present = {i for i in range(blocks) if rng.random() < density}
        hashes = [i.to_bytes(8, "little") for i in range(blocks)]
        _, vllm_hit = manager_class.find_longest_cache_hit(
            hashes, blocks * BLOCK, [0], CachedBlockPool(present, BLOCK), spec, False, BLOCK
        )
        ours = longest_hit([rule], [[i in present for i in range(blocks)]], 0) * BLOCK
        agree += ours == vllm_hit
    return agree, trials


def mamba_model_gets_no_hits(model: str) -> dict:
    config = connector_config(model, BLOCK, None)
    mamba = MambaSpec(block_size=BLOCK, shapes=((4, 16),), dtypes=(torch.float32,), mamba_cache_mode="align")
    groups = [
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"], FullAttentionSpec(**SHAPE)),
        KVCacheGroupSpec(["model.layers.1.mixer"], mamba),
    ]
    kv_config = KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=groups)
    scheduler = KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER, kv_config)
    tokens = [(i * 7 + 3) % 500 + 5 for i in range(4 * BLOCK + 1)]
    # Every full-attention block is in the store: the Mamba group's state is what is missing.
    store = scheduler.link.get()
    seqs, digests = scheduler.names.prompt(tokens)
    keys = [scheduler.names.key(s, d, 0, m, 2) for s, d in zip(seqs, digests, strict=True) for m in range(2)]
    data = bytes(64)
    for key in keys:
        store.put(key, data)
    stored = store.batch_exists(keys)
    request = SimpleNamespace(request_id="m", prompt_token_ids=tokens)
    matched = scheduler.get_num_new_matched_tokens(request, 0)
    return {"mamba_active": scheduler.active, "mamba_matched": list(matched), "mamba_stored": all(stored)}


def main() -> None:
    rng = random.Random(40)
    out: dict = {}
    for name, (spec, manager_class) in SERVED.items():
        out[name] = {
            "rule": rule_for_spec(spec).kind,
            "skipped_agree": skipped_rule_agrees(spec, manager_class),
            "hits_agree": hits_agree(spec, manager_class, rng),
        }
    out["unserved"] = {
        "mamba": rule_for_spec(MambaSpec(block_size=BLOCK, shapes=((4, 16),), dtypes=(torch.float32,)))
        is None,
        "cross": rule_for_spec(CrossAttentionSpec(**SHAPE)) is None,
    }
    out.update(mamba_model_gets_no_hits(tiny_model_dir()))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
