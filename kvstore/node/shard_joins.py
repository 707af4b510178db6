"""Moved to kvstore.cluster.shard_joins (a client joins a shard that answers late the same way a node does);
named here as well for the node's code and tests that import it from here."""

from kvstore.cluster.shard_joins import HELLO_SECONDS, ShardJoins, master_answers

__all__ = ["HELLO_SECONDS", "ShardJoins", "master_answers"]
