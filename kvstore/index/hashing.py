"""The KV-events contract's block hash (RFC #1527, as Dynamo and Mooncake Conductor use it):

    local[i] = XXH3_64(tokens of block i as little-endian u32, seed)
    seq[0]   = local[0]
    seq[i]   = XXH3_64(seq[i-1] as 8 bytes little-endian || local[i] as 8 bytes little-endian, seed)

A sequence hash names a block and its whole prefix. Only full blocks are hashed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xxhash

from kvstore.errors import InvalidArgumentError

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
