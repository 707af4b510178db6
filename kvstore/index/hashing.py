"""The KV-events contract's block hash (RFC #1527, as Dynamo and Mooncake Conductor use it):

    local[i] = XXH3_64(tokens of block i as little-endian u32, seed)
    seq[0]   = local[0]
    seq[i]   = XXH3_64(seq[i-1] as 8 bytes little-endian || local[i] as 8 bytes little-endian, seed)

A sequence hash names a block and its whole prefix. Only full blocks are hashed.
"""

from __future__ import annotations

# (defined in kvstore.blocks: the connectors key blocks by these hashes, and routers must agree with them)
from kvstore.blocks import DEFAULT_SEED, U64, seq_hashes, token_array

__all__ = ["DEFAULT_SEED", "U64", "seq_hashes", "token_array"]
