"""The connector's state-group rule (kvstore.integrations.vllm_groups, STATE) against vLLM's own MambaManager,
with vLLM's real MambaSpec:

- its skipped-token rule equals MambaManager.get_num_skipped_tokens;
- its longest hit over a set of blocks whose state is present equals MambaManager.find_longest_cache_hit
  over a block pool holding exactly those blocks (random patterns), alone and next to full attention
  (the longest prefix both groups can serve, as vLLM's hybrid coordinator finds it);
- MambaSpec outside "align" mode, or with speculative blocks, has no rule (not served);
- the offers the connector saves (kvstore.integrations.vllm_state.checkpointed_blocks) are the whole-block
  boundaries of the prompt's blocks past the hit, nothing else.

Prints one JSON object.
"""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

import torch
from vllm.v1.core import single_type_kv_cache_manager as managers
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
from vllm_common import CachedBlockPool

from kvstore.integrations.vllm_groups import GroupRule, longest_hit, rule_for_spec
from kvstore.integrations.vllm_state import checkpointed_blocks

BLOCK = 32
MAMBA = MambaSpec(block_size=BLOCK, shapes=((4, 16),), dtypes=(torch.float32,), mamba_cache_mode="align")
FULL = FullAttentionSpec(block_size=BLOCK, num_kv_heads=2, head_size=32, dtype=torch.float32)


def vllm_hit(manager_class, spec, present: set[int], blocks: int, max_blocks: int) -> int:
    hashes = [i.to_bytes(8, "little") for i in range(blocks)]
    _, hit = manager_class.find_longest_cache_hit(
        hashes, max_blocks * BLOCK, [0], CachedBlockPool(present, BLOCK), spec, False, BLOCK
    )
    return hit // BLOCK


def hybrid_vllm_hit(full: set[int], state: set[int], blocks: int) -> int:
    """vLLM's hybrid rule: each group's hit capped by the other's, until both agree."""
    limit = blocks
    while True:
        hit = min(vllm_hit(managers.FullAttentionManager, FULL, full, blocks, limit), limit)
        hit = min(vllm_hit(managers.MambaManager, MAMBA, state, blocks, hit), hit)
        if hit == limit:
            return hit
        limit = hit


def hits_agree(rng: random.Random, trials: int = 300) -> dict:
    rule, full_rule = rule_for_spec(MAMBA), GroupRule("full", BLOCK)
    alone = hybrid = 0
    for _ in range(trials):
        blocks = rng.randint(1, 20)
        state = {i for i in range(blocks) if rng.random() < rng.random()}
        full = {i for i in range(blocks) if rng.random() < 0.9}
        ours = longest_hit([rule], [[i in state for i in range(blocks)]], 0)
        alone += ours == vllm_hit(managers.MambaManager, MAMBA, state, blocks, blocks)
        rows = [[i in full for i in range(blocks)], [i in state for i in range(blocks)]]
        hybrid += longest_hit([full_rule, rule], rows, 0) == hybrid_vllm_hit(full, state, blocks)
    return {"alone": [alone, trials], "hybrid": [hybrid, trials]}


def main() -> None:
    rule = rule_for_spec(MAMBA)
    manager = SimpleNamespace()
    offers = [(1, 11, 64), (1, 12, 96), (1, 13, 100), (0, 14, 128), (1, 0, 160), (1, 15, 192), (1, 16, 224)]
    out = {
        "rule": rule.kind if rule else None,
        "skipped_agree": all(
            rule.skipped_tokens(t) == managers.MambaManager.get_num_skipped_tokens(manager, t)
            for t in range(1, 2000, 7)
        ),
        "hits": hits_agree(random.Random(40)),
        "unserved": {
            "none_mode": rule_for_spec(
                MambaSpec(block_size=BLOCK, shapes=((4, 16),), dtypes=(torch.float32,))
            )
            is None,
            "speculative": rule_for_spec(
                MambaSpec(
                    block_size=BLOCK,
                    shapes=((4, 16),),
                    dtypes=(torch.float32,),
                    mamba_cache_mode="align",
                    num_speculative_blocks=1,
                )
            )
            is None,
        },
        # hit of 2 blocks, a prompt of 6 full blocks: boundaries 96 (block 2) and 192 (block 5) only
        "checkpointed": checkpointed_blocks(offers, {1}, BLOCK, 2, 6),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
