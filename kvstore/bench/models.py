"""KV geometries of the models the connector bench lays blocks out for (a module of its own, so the CLI
names them without importing the store)."""

# name: (layers, kv heads, head dim, bytes per element, tokens per block)
MODELS = {
    "llama3-8b": (32, 8, 128, 2, 16),
    "llama3-70b": (80, 8, 128, 2, 16),
    "qwen2.5-7b": (28, 4, 128, 2, 16),
}
