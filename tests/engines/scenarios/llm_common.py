"""What the scenarios share that needs no engine import: a tiny model's config.json and the kvstore
connector's settings as `vllm.LLM(kv_transfer_config=...)` takes them.

Imported by plain `import llm_common` (a scenario runs as `python scenarios/<name>.py`, so this folder is
sys.path[0]); it imports neither vLLM nor torch, so a scenario that loads vLLM only in main() may import it.
"""

from __future__ import annotations

import json
import os
import tempfile


def write_model_config(path: str, config: dict) -> str:
    """`path` (created if missing) with `config` as its config.json: vLLM's dummy weights need no more."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def temp_model_dir(prefix: str, config: dict) -> str:
    """A fresh temporary model folder holding `config` (one per call: a new path, a new namespace)."""
    return write_model_config(tempfile.mkdtemp(prefix=prefix), config)


def llama_config(
    *,
    hidden: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    layers: int,
    intermediate: int = 256,
    vocab: int = 512,
    max_positions: int = 1024,
) -> dict:
    """A Llama config.json for vLLM's dummy weights (float32, token ids 1 and 2 as BOS and EOS)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "max_position_embeddings": max_positions,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def connector_transfer(extra: dict | None = None) -> dict:
    """The kvstore connector as `vllm.LLM`'s kv_transfer_config; the master from KVSTORE_MASTER, as an
    operator would have it, and the default namespace unless `extra` names one."""
    return {
        "kv_connector": "KVStoreConnector",
        "kv_connector_module_path": "kvstore.integrations.vllm",
        "kv_role": "kv_both",
        "kv_connector_extra_config": dict(extra or {}),
    }
