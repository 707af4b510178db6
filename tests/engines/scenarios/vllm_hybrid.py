"""End to end with window attention: `vllm.LLM` on CPU, a tiny dummy-weight model built from a local config
(fixed seed, no download), as one instance:

    vllm_hybrid.py MODEL reference   no connector: prompt `first`, then `second` (vLLM's own prefix cache,
                                     keeping every block, serves what it can: the count a connector
                                     should match), then
                                     `second` again without reading the cache (the reference tokens)
    vllm_hybrid.py MODEL first       with the connector: stores `first`
    vllm_hybrid.py MODEL second      with the connector, a fresh instance: `second` shares SHARED_BLOCKS
                                     blocks with `first`

MODEL is `gemma3` (Gemma-3 text: 5 sliding-window layers, window 128, then 1 full-attention layer: two
KV cache groups) or `mistral` (every layer sliding-window, window 128: one group). Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import sys

from llm_common import connector_transfer, write_model_config

BLOCK = 32  # vLLM's CPU attention wants multiples of 32
SHARED_BLOCKS = 12
WINDOW = 128
VOCAB = 512

COMMON = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": VOCAB,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "sliding_window": WINDOW,
}
MODELS = {
    "gemma3": {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "num_hidden_layers": 6,
        "layer_types": ["sliding_attention"] * 5 + ["full_attention"],
        "query_pre_attn_scalar": 32,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "hidden_activation": "gelu_pytorch_tanh",
    },
    "mistral": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "num_hidden_layers": 3,
        "rope_theta": 10000.0,
    },
}


def model_dir(model: str) -> str:
    """One path per model for every instance (the default namespace names the model's path)."""
    return write_model_config(os.path.abspath(f"hybrid-{model}"), {**COMMON, **MODELS[model]})


def prompts() -> dict[str, list[int]]:
    shared = [(i * 7 + 3) % (VOCAB - 10) + 5 for i in range(SHARED_BLOCKS * BLOCK)]
    first = shared + [(i * 13 + 1) % (VOCAB - 10) + 5 for i in range(2 * BLOCK)]  # 448 tokens
    second = shared + [(i * 11 + 2) % (VOCAB - 10) + 5 for i in range(2 * BLOCK + 5)]
    return {"first": first, "second": second}


def main() -> None:
    model, role = sys.argv[1], sys.argv[2]
    from vllm import LLM, SamplingParams

    # The reference instance keeps every window block in its own cache (vLLM's default keeps only the
    # window at a prompt's end): it holds the shared blocks the way the store does.
    options: dict = {"prefix_cache_retention_interval": None} if role == "reference" else {}
    if role != "reference":
        options["kv_transfer_config"] = connector_transfer()
    llm = LLM(
        model=model_dir(model),
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        enforce_eager=True,
        max_model_len=1024,
        block_size=BLOCK,
        max_num_seqs=1,
        kv_cache_memory_bytes=64 << 20,
        **options,
    )
    params = SamplingParams(max_tokens=8, temperature=0, detokenize=False)
    runs = {"first": ["first"], "second": ["second"], "reference": ["first", "second"]}[role]
    out: dict = {"model": model, "role": role}
    for name in runs:
        (result,) = llm.generate([{"prompt_token_ids": prompts()[name]}], params, use_tqdm=False)
        out[name] = {
            "prompt_tokens": len(prompts()[name]),
            "num_cached_tokens": result.num_cached_tokens or 0,
            "tokens": list(result.outputs[0].token_ids),
        }
    if role == "reference":
        cold = SamplingParams(max_tokens=8, temperature=0, detokenize=False, skip_reading_prefix_cache=True)
        (result,) = llm.generate([{"prompt_token_ids": prompts()["second"]}], cold, use_tqdm=False)
        out["second_cold"] = {
            "num_cached_tokens": result.num_cached_tokens or 0,
            "tokens": list(result.outputs[0].token_ids),
        }
    print(json.dumps(out))


if __name__ == "__main__":  # vLLM starts its engine processes with spawn
    main()
