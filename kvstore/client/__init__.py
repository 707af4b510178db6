"""The store client: the public API (Store), its session with the master, buffers and lease cache."""

from kvstore.client.store import MISS, OK, Store, result_error

__all__ = ["MISS", "OK", "Store", "result_error"]
