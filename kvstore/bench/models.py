"""KV geometries of the models the connector bench lays blocks out for (a module of its own, so the CLI
names them without importing the store)."""

# name: (layers, kv heads, head dim, bytes per element, tokens per block)
MODELS = {
    "llama3-8b": (32, 8, 128, 2, 16),
    "llama3-70b": (80, 8, 128, 2, 16),
    "qwen2.5-7b": (28, 4, 128, 2, 16),
}

# Hybrid models, sliding-window layers beside full-attention ones (`--case hybrid`):
# name: (layers, kv heads, head dim, bytes per element, tokens per block, every how many layers one is full
# attention). Gemma 3: layer i is full attention when (i + 1) % 6 == 0, the five before it a sliding window
# (1024 tokens in the released models; the bench takes the window from --window).
HYBRID_MODELS = {
    "gemma3-4b": (34, 4, 256, 2, 16, 6),
    "gemma3-12b": (48, 8, 256, 2, 16, 6),
}

CASES = ("dense", "hybrid", "tp-mismatch")
