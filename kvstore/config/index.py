"""Routing index configuration: `KVSTORE_INDEX_*` variables (code beats environment beats defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvstore.config.component import Component
from kvstore.errors import InvalidArgumentError
from transfer_engine.settings import setting


@dataclass
class IndexConfig(Component):
    """`kvstore index`: the cache-aware routing index (Mooncake Conductor's HTTP API)."""

    ENV_PREFIX: ClassVar[str] = "KVSTORE_INDEX_"

    host: str = setting(
        "127.0.0.1", "Address the HTTP API listens on (beyond loopback only with KVSTORE_INSECURE=1)."
    )
    port: int = setting(8710, "HTTP port; 0 picks a free one.", "port")
    hash_seed: int = setting(1337, "Seed of the XXH3-64 rolling block hash (the KV-events contract's).")
    max_blocks: int = setting(
        16_000_000, "Blocks the index holds at most, over every scope; more are refused."
    )
    max_publishers: int = setting(4096, "Registered publishers at most.")
    max_connections: int = setting(
        256,
        "HTTP connections at once (a thread each); a new one past it takes the place of the one idle "
        "longest (not answering a request), so idle sockets never lock a router out.",
    )
    idle_timeout: float = setting(
        60.0,
        "Seconds a connection may stay silent waiting for (or within) a request before it is cut.",
        "seconds",
    )

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.hash_seed < 1 << 64:
            raise InvalidArgumentError("KVSTORE_INDEX_HASH_SEED must be in [0, 2^64)")
        if self.max_blocks <= 0 or self.max_publishers <= 0:
            raise InvalidArgumentError("KVSTORE_INDEX_MAX_BLOCKS and _MAX_PUBLISHERS must be positive")
        if self.max_connections <= 0 or self.idle_timeout <= 0:
            raise InvalidArgumentError("KVSTORE_INDEX_MAX_CONNECTIONS and _IDLE_TIMEOUT must be positive")
