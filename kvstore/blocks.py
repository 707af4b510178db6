"""Prefix-chained block keys.

A prompt is cut into blocks of `block_size` tokens; block i's key is

    h_i = xxh3_128(h_{i-1} || tokens of block i as little-endian uint32 || namespace),  h_-1 = 16 zero bytes

as 32 lowercase hex digits. A key therefore names the block *and its whole prefix*: equal keys mean equal
prefixes. The namespace (model, rank, dtype, ...) keeps caches of different models apart. Deterministic
across processes, machines and Python versions (never `hash()`). Only full blocks get keys: a partial
trailing block is not cached.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import xxhash

from kvstore.errors import InvalidArgumentError

_ROOT = bytes(16)


# -- the KV-events contract's block hash (RFC #1527, as Dynamo and Mooncake Conductor use it) --------------
#     local[i] = XXH3_64(tokens of block i as little-endian u32, seed)
#     seq[0]   = local[0]
#     seq[i]   = XXH3_64(seq[i-1] as 8 bytes little-endian || local[i] as 8 bytes little-endian, seed)
# A sequence hash names a block and its whole prefix; only full blocks are hashed. Connectors key blocks by
# it (seq_key), so a router following the store's KV events (kvstore index) credits them.

DEFAULT_SEED = 1337  # the contract's recommended seed (Dynamo's)
U64 = (1 << 64) - 1


def token_array(tokens: Sequence[int] | np.ndarray) -> np.ndarray:
    """`tokens` as little-endian u32, or InvalidArgumentError (ids must be in [0, 2^32))."""
    try:
        array = np.asarray(tokens)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgumentError(f"token ids must be integers: {exc}") from None
    if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
        raise InvalidArgumentError("token ids must be a flat list of integers")
    if array.size and (int(array.min()) < 0 or int(array.max()) > 0xFFFFFFFF):
        raise InvalidArgumentError("token ids must be in [0, 2^32)")
    return array.astype("<u4", copy=False)


def seq_hashes(
    tokens: Sequence[int] | np.ndarray, block_size: int, seed: int = DEFAULT_SEED, parent: int | None = None
) -> list[int]:
    """The sequence hashes of every full block of `tokens`, continuing from `parent` (the sequence hash
    of the block before the first, None at the root)."""
    if block_size <= 0:
        raise InvalidArgumentError("block_size must be positive")
    data = token_array(tokens).tobytes()
    step = 4 * block_size
    local = xxhash.xxh3_64_intdigest
    out: list[int] = []
    for start in range(0, len(data) - step + 1, step):
        block = local(data[start : start + step], seed)
        if parent is None:
            parent = block
        else:
            parent = local(parent.to_bytes(8, "little") + block.to_bytes(8, "little"), seed)
        out.append(parent)
    return out


class BlockHasher:
    def __init__(self, block_size: int, namespace: str = "") -> None:
        if not isinstance(block_size, int) or block_size <= 0:
            raise InvalidArgumentError("block_size must be a positive integer")
        self.block_size = block_size
        self.namespace = namespace
        self._suffix = namespace.encode()

    def keys(self, tokens: Sequence[int] | np.ndarray) -> list[str]:
        """Keys of every full block of `tokens` (token ids in [0, 2^32))."""
        array = np.asarray(tokens)
        if array.ndim != 1 or (array.size and not np.issubdtype(array.dtype, np.integer)):
            raise InvalidArgumentError("tokens must be a flat sequence of integer ids")
        if array.size and (array.min() < 0 or array.max() >= 2**32):
            raise InvalidArgumentError("token ids must be in [0, 2^32)")
        data = array.astype("<u4", copy=False).tobytes()
        step = 4 * self.block_size
        keys: list[str] = []
        parent = _ROOT
        for start in range(0, len(data) - step + 1, step):
            digest = xxhash.xxh3_128(parent + data[start : start + step] + self._suffix).digest()
            keys.append(digest.hex())
            parent = digest
        return keys

    def keys_from_ids(self, ids: Iterable[int | bytes]) -> list[str]:
        """Store keys for block ids made by an engine's own (already prefix-chained) hasher.

        Ints (any size, two's complement) and bytes are accepted; the namespace is mixed in, so two models'
        ids never collide in one store.
        """
        keys = []
        for block_id in ids:
            if isinstance(block_id, bool) or not isinstance(block_id, (int, bytes)):
                raise InvalidArgumentError("engine block ids must be ints or bytes")
            if isinstance(block_id, int):
                length = max(16, (block_id.bit_length() + 8) // 8)
                raw = block_id.to_bytes(length, "little", signed=True)
            else:
                raw = block_id
            keys.append(xxhash.xxh3_128(b"engine-id:" + raw + b"|" + self._suffix).hexdigest())
        return keys


# -- keys the store itself gives a meaning to ---------------------------------------------------------
# A *group* is the objects of one block (its layers, KV cache groups, head slices), possibly written by
# several processes: `<group>#<i>of<n>` is member i of n. The master shows a member only while all n are
# stored, and leases, evicts and removes the n as one (kvstore.master). Keys of this form are reserved.
# Both are part of a sharded cluster's routing (kvstore.cluster.shards routes a member by its group):
# changing either sends some stored keys to another master, where their reads miss.
MAX_GROUP_MEMBERS = 1024
_MEMBER = re.compile(r"(.+)#(0|[1-9][0-9]{0,3})of([1-9][0-9]{0,3})", re.DOTALL)


def member_key(group: str, index: int, count: int) -> str:
    """Member `index` of a group of `count` objects."""
    if not group or not 0 < count <= MAX_GROUP_MEMBERS or not 0 <= index < count:
        raise InvalidArgumentError(
            f"a group member is index 0 <= i < count <= {MAX_GROUP_MEMBERS} of a non-empty group key"
        )
    return f"{group}#{index}of{count}"


def member_keys(group: str, indices: Iterable[int], count: int) -> list[str]:
    """The keys of members `indices` of a group of `count` (the group and count checked once)."""
    member_key(group, 0, count)
    keys = []
    for i in indices:
        if not 0 <= i < count:
            raise InvalidArgumentError(f"member {i} of a group of {count}")
        keys.append(f"{group}#{i}of{count}")
    return keys


def group_keys(group: str, count: int) -> list[str]:
    """Every member key of a group, in member order."""
    return member_keys(group, range(count), count)


def group_of(key: str) -> tuple[str, int, int] | None:
    """(group, index, count) of a member key; None for any other key."""
    match = _MEMBER.fullmatch(key)
    if match is None:
        return None
    index, count = int(match[2]), int(match[3])
    return (match[1], index, count) if index < count <= MAX_GROUP_MEMBERS else None


# A block keyed by an engine's own 64-bit block hash (the one its KV events carry, RFC #1527 seq_hashes):
# `<namespace>/0x<16 hex digits>`. Routers that follow the store's events credit it to every instance
# serving that namespace's model.
# An optional `.<32 hex>` after it is a 128-bit digest of the same prefix (BlockHasher.keys): two prefixes
# whose 64-bit hashes collide still get different keys, so a collision is a miss, never another's bytes.
_SEQ = re.compile(r"(.*)/0x([0-9a-f]{16})(?:\.[0-9a-f]{32})?", re.DOTALL)


def seq_key(namespace: str, seq_hash: int, digest: str = "") -> str:
    """The key of a block an engine names by `seq_hash` (0 <= seq_hash < 2^64), with `digest` (32 lowercase
    hex digits, e.g. the block's BlockHasher key) when given."""
    if isinstance(seq_hash, bool) or not isinstance(seq_hash, int) or not 0 <= seq_hash < 2**64:
        raise InvalidArgumentError("a sequence hash is an int in [0, 2^64)")
    if digest and not re.fullmatch("[0-9a-f]{32}", digest):
        raise InvalidArgumentError("a block digest is 32 lowercase hex digits")
    return f"{namespace}/0x{seq_hash:016x}" + (f".{digest}" if digest else "")


def seq_of(key: str) -> tuple[str, int] | None:
    """(namespace, sequence hash) of a seq_key, or of a group member whose group is one; else None."""
    member = group_of(key)
    match = _SEQ.fullmatch(member[0] if member is not None else key)
    return (match[1], int(match[2], 16)) if match is not None else None
