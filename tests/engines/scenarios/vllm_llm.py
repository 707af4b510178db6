"""End to end: `vllm.LLM` on CPU with a small randomly initialised model (built from a local config, dummy
weights, fixed seed, no download), as one instance. Run three times by the engines tier, each a fresh
process (a fresh "instance"), against one kvstore (KVSTORE_MASTER):

    vllm_llm.py baseline   no connector: the reference tokens and time to first token
    vllm_llm.py first      with the connector: a prompt whose blocks it saves
    vllm_llm.py second     with the connector: a prompt sharing most blocks with `first`'s

    ... ROLE --kv-events ENDPOINT REPLAY_ENDPOINT   also publish vLLM's KV events there (ZMQ), for the
                                                    routing index (kvstore index) to follow

Prints one JSON object: generated tokens, prompt tokens served from cache (num_cached_tokens: this
instance's own prefix cache is empty, so they came through the connector), time to first token.
"""

from __future__ import annotations

import json
import os
import sys
import time

from llm_common import connector_transfer, llama_config, write_model_config

BLOCK = 32  # vLLM's CPU attention wants multiples of 32
SHARED_BLOCKS = 31
VOCAB = 512


def model_dir() -> str:
    """A Llama-shaped model big enough that prefill costs something on two cores (~50M parameters)."""
    # One path for every instance: the connector's default namespace is the model's name (plus a digest
    # of the KV layout), as two instances serving the same model would have it.
    shape = {"hidden": 1024, "heads": 8, "kv_heads": 8, "head_dim": 128, "layers": 4, "intermediate": 2816}
    config = llama_config(**shape, vocab=VOCAB, max_positions=4096)
    return write_model_config(os.path.abspath("e2e-llama"), config)


def prompts() -> dict[str, list[int]]:
    shared = [(i * 7 + 3) % (VOCAB - 10) + 5 for i in range(SHARED_BLOCKS * BLOCK)]
    first = shared + [(i * 13 + 1) % (VOCAB - 10) + 5 for i in range(BLOCK)]
    second = shared + [(i * 11 + 2) % (VOCAB - 10) + 5 for i in range(2 * BLOCK)]
    return {"baseline": second, "first": first, "second": second}


def main() -> None:
    role = sys.argv[1]
    from vllm import LLM, SamplingParams

    options: dict = {}
    if "--kv-events" in sys.argv:
        from vllm.config import KVEventsConfig

        at = sys.argv.index("--kv-events")
        endpoint, replay = sys.argv[at + 1 : at + 3]
        options["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=endpoint, replay_endpoint=replay
        )
    if role != "baseline":
        options["kv_transfer_config"] = connector_transfer()
    llm = LLM(
        model=model_dir(),
        load_format="dummy",
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        enforce_eager=True,
        max_model_len=2048,
        block_size=BLOCK,
        max_num_seqs=1,
        kv_cache_memory_bytes=256 << 20,
        disable_log_stats=False,
        **options,
    )
    params = SamplingParams(max_tokens=8, temperature=0, detokenize=False)
    # Warm-up on tokens no other prompt has (first-call kernel set-up would otherwise land in the TTFT).
    llm.generate([{"prompt_token_ids": [VOCAB - 3] * (2 * BLOCK)}], params, use_tqdm=False)
    prompt = prompts()[role]
    start = time.perf_counter()
    (out,) = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    wall = time.perf_counter() - start
    metrics = out.metrics
    ttft = getattr(metrics, "first_token_latency", 0.0) if metrics is not None else 0.0
    time.sleep(0.5)  # (the publisher thread sends what the engine queued; the index reads it while we live)
    print(
        json.dumps(
            {
                "role": role,
                "prompt_tokens": len(prompt),
                "tokens": list(out.outputs[0].token_ids),
                "num_cached_tokens": out.num_cached_tokens or 0,
                "ttft_s": ttft,
                "generate_s": wall,
            }
        )
    )


if __name__ == "__main__":  # vLLM starts its engine processes with spawn
    main()
