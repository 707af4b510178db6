"""kvstore: a distributed KV-cache store for LLM inference."""

from transfer_engine.errors import KVStoreError

__version__ = "0.1.0"
__all__ = ["KVStoreError", "__version__"]
