"""Which shard of a cluster split over S masters holds a key: the one rule every client routes by and
every sharded master checks the puts it is sent against. Both sides must agree on it bit for bit, as on
the wire, so it lives with the protocol (the master may not import kvstore.cluster).

A key's shard is the unseeded XXH3-64 of its UTF-8 bytes mod S; a store group's member (kvstore.blocks'
member form) routes by its group's name, so a group lives on one master. Changing either reroutes every
stored key of a sharded cluster (test_shard_routing_is_one_pure_function pins values).

A batch is hashed in one crossing (transfer_engine.checksum: XXH3 in C++ over the keys' bytes joined
once), not one Python call a key: the master checks every put_start batch of a sharded cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xxhash

from kvstore.blocks import group_of


def routing_key(key: str) -> str:
    """What a key is routed by: a store group's member by its group (kvstore.blocks.group_of), so the
    master that makes a group visible and evicts it whole holds every member; any other key by itself."""
    if "#" in key:  # (the member form's regex only for keys that may be one)
        member = group_of(key)
        if member is not None:
            return member[0]
    return key


def shard_of(key: str, shards: int) -> int:
    """The shard that holds `key`. A value that is not a str is no key: shard 0's, whose Store refuses
    it alone under the key rule, as one Store does (a client of several shards fails it as one client)."""
    if not isinstance(key, str):
        return 0
    return xxhash.xxh3_64_intdigest(routing_key(key).encode("utf-8", "surrogatepass")) % shards


def shards_of(keys: Sequence[str], shards: int) -> np.ndarray:
    """Each key's shard (shard_of), as int64, for a whole batch in one hashing call."""
    if shards == 1 or not keys:
        return np.zeros(len(keys), dtype=np.int64)
    from transfer_engine import checksum  # (loads the data plane's extension: sharded clusters only)

    try:  # (no C++ XXH3 here, or a value that is not a str: shard_of key by key; shard 0 refuses it alone)
        joined = "".join(keys) if checksum.available() else None
    except TypeError:
        joined = None
    if joined is None:
        return np.fromiter((shard_of(k, shards) for k in keys), dtype=np.int64, count=len(keys))
    routed = list(map(routing_key, keys)) if "#" in joined else keys
    if routed is not keys:
        joined = "".join(routed)
    data = joined.encode("utf-8", "surrogatepass")
    if len(data) == len(joined):  # all ASCII: each key's bytes are as many as its characters
        lengths = np.fromiter(map(len, routed), dtype=np.uint64, count=len(routed))
    else:
        encoded = [k.encode("utf-8", "surrogatepass") for k in routed]
        data = b"".join(encoded)
        lengths = np.fromiter(map(len, encoded), dtype=np.uint64, count=len(encoded))
    view = np.frombuffer(data, dtype=np.uint8) if data else np.zeros(1, dtype=np.uint8)
    addrs = np.cumsum(lengths) - lengths + np.uint64(view.ctypes.data)
    ones = np.ones(len(routed), dtype=np.uint64)
    digests = checksum.xxh3_digests(addrs, lengths, ones)  # (`data` lives until it returns)
    return (digests % np.uint64(shards)).astype(np.int64)


def first_off_shard(keys: Sequence[str], shard: int, shards: int) -> int:
    """The position of the first of `keys` that another shard holds than `shard` (of `shards`); -1 when
    every key is `shard`'s."""
    if shards == 1:
        return -1
    off = np.flatnonzero(shards_of(keys, shards) != shard)
    return int(off[0]) if off.size else -1
