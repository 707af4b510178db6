"""Prefix-chained block keys.

A prompt is cut into blocks of `block_size` tokens; block i's key is

    h_i = xxh3_128(h_{i-1} || tokens of block i as little-endian uint32 || namespace),  h_-1 = 16 zero bytes

as 32 lowercase hex digits. A key therefore names the block *and its whole prefix*: equal keys mean equal
prefixes. The namespace (model, rank, dtype, ...) keeps caches of different models apart. Deterministic
across processes, machines and Python versions (never `hash()`). Only full blocks get keys: a partial
trailing block is not cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import xxhash

from kvstore.errors import InvalidArgumentError

_ROOT = bytes(16)


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
