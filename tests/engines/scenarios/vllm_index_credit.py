"""A block stored through the real vLLM connector, for the routing index to credit: `vllm.LLM` on CPU with
a tiny dummy-weight Llama built from a local config (fixed seed, no download), as one fresh instance, the
connector keying its blocks under the namespace NAMESPACE:

    vllm_index_credit.py first    stores PROMPT's full blocks (its own prefix cache is cold)
    vllm_index_credit.py second   a fresh instance with the same prompt: what it loads through the store

Prints one JSON object: the prompt, its tokens served from cache (num_cached_tokens: through the connector,
this instance's own cache being empty) and the generated tokens.
"""

from __future__ import annotations

import json
import os
import sys

from llm_common import connector_transfer, llama_config, write_model_config

BLOCK = 32  # vLLM's CPU attention wants multiples of 32
FULL_BLOCKS = 4
VOCAB = 512
NAMESPACE = "index-credit-llama"

CONFIG = llama_config(hidden=128, heads=4, kv_heads=2, head_dim=32, layers=2, vocab=VOCAB)


def prompt() -> list[int]:
    """FULL_BLOCKS whole blocks and a partial one (not stored)."""
    return [(i * 7 + 3) % (VOCAB - 10) + 5 for i in range(FULL_BLOCKS * BLOCK + 5)]


def main() -> None:
    role = sys.argv[1]
    from vllm import LLM, SamplingParams

    path = write_model_config(os.path.abspath("index-credit-llama"), CONFIG)
    llm = LLM(
        model=path,
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        enforce_eager=True,
        max_model_len=512,
        block_size=BLOCK,
        max_num_seqs=1,
        kv_cache_memory_bytes=32 << 20,
        kv_transfer_config=connector_transfer({"namespace": NAMESPACE}),
    )
    params = SamplingParams(max_tokens=6, temperature=0, detokenize=False)
    (out,) = llm.generate([{"prompt_token_ids": prompt()}], params, use_tqdm=False)
    print(
        json.dumps(
            {
                "role": role,
                "prompt": prompt(),
                "num_cached_tokens": out.num_cached_tokens or 0,
                "tokens": list(out.outputs[0].token_ids),
            }
        )
    )


if __name__ == "__main__":  # vLLM starts its engine processes with spawn
    main()
