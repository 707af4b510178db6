"""The storage node role: memory contributed to the pool, and the replica copies the master assigns."""

from kvstore.node.storage import StorageNode

__all__ = ["StorageNode"]
