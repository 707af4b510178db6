"""A sharded master stores only its own shard's keys (kvstore.rpc.shard_keys: the clients' routing rule).

Clients check at hello that a master serves the shard they route to it, but a client whose master list
or shard map is stale or wrong can still send a key another shard holds: stored here, every other client
would look for it on its own shard and miss it, and a second put there could make one key two values.
A put_start batch holding such a key is refused whole, naming the shards; one hashing call a batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstore.errors import InvalidArgumentError
from kvstore.rpc.put_items import PutColumns, PutItem
from kvstore.rpc.shard_keys import first_off_shard, shard_of


def check_put_items(shard: tuple[int, int], items: Sequence[PutItem]) -> None:
    """Refuses a batch of PutItems that holds a key of another shard than `shard` (this master's
    (shard, shards)); a one-shard master takes every key, at no cost."""
    index, shards = shard
    if shards == 1:
        return
    keys = PutColumns.of(items).keys
    at = first_off_shard(keys, index, shards)
    if at >= 0:
        raise InvalidArgumentError(
            f"key {keys[at]!r} is held by shard {shard_of(keys[at], shards)} of {shards}, and this master "
            f"serves shard {index}: the client routes by another shard map than the cluster's (a stale or "
            "wrong master list); nothing of this batch was stored"
        )
