"""Master configuration (typed; `KVSTORE_MASTER_*` environment overrides, code beats environment)."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from kvstore.errors import InvalidArgumentError
from transfer_engine.config import coerce_setting


@dataclass
class MasterConfig:
    host: str = "127.0.0.1"
    """Address the RPC server listens on."""
    port: int = 0
    """RPC port; 0 picks a free one."""
    http_port: int | None = None
    """Port for /metrics and /health; None disables HTTP, 0 picks a free port."""
    client_ttl: float = 10.0
    """Seconds without a heartbeat after which a client's segments and their replicas are dropped."""
    heartbeat_interval: float = 1.0
    """How often clients are told to heartbeat."""
    lease_ttl: float = 5.0
    """Seconds a get keeps an object safe from eviction and removal."""
    put_timeout: float = 30.0
    """A put started and neither ended nor revoked by then is reclaimed."""
    high_watermark: float = 0.95
    """Usage above which background eviction starts."""
    low_watermark: float = 0.85
    """Usage background eviction brings the pool down to."""
    eviction_policy: str = "adaptive"
    """Name of the eviction policy (kvstore.master.eviction.POLICIES)."""
    max_replicas: int = 8
    allocation_alignment: int = 64
    """Replica offsets are multiples of this."""
    hot_access_rate: float = 20.0
    """Accesses per second above which a key gains replicas on other segments."""
    cool_access_rate: float = 2.0
    """Accesses per second below which a key's extra replicas are dropped again."""
    max_hot_replicas: int = 3
    """Replicas a hot key grows to (bounded by the number of segments)."""
    heat_half_life: float = 5.0
    """Seconds over which a key's access count halves."""
    busy_poll_us: int = 200
    """Microseconds the event loop polls for the next request before sleeping: a sleeping process takes
    ~80 µs to wake on a VM. 0 for a master sharing its process (and GIL) with clients."""

    def validate(self) -> None:
        if not 0 < self.low_watermark <= self.high_watermark <= 1:
            raise InvalidArgumentError("need 0 < low_watermark <= high_watermark <= 1")
        for name in ("client_ttl", "heartbeat_interval", "lease_ttl", "put_timeout"):
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"{name} must be positive")
        if self.heartbeat_interval >= self.client_ttl:
            raise InvalidArgumentError("heartbeat_interval must be shorter than client_ttl")
        if not 0 <= self.port <= 65535 or (self.http_port is not None and not 0 <= self.http_port <= 65535):
            raise InvalidArgumentError("ports must be 0..65535")
        if not 1 <= self.max_replicas <= 64 or self.allocation_alignment < 1:
            raise InvalidArgumentError("bad max_replicas or allocation_alignment")
        if not 0 <= self.cool_access_rate <= self.hot_access_rate or self.heat_half_life <= 0:
            raise InvalidArgumentError("need 0 <= cool_access_rate <= hot_access_rate and heat_half_life > 0")
        if not 1 <= self.max_hot_replicas <= self.max_replicas:
            raise InvalidArgumentError("max_hot_replicas must be 1..max_replicas")

    @classmethod
    def load(cls, **overrides: Any) -> MasterConfig:
        config = cls()
        known = {f.name: f for f in fields(cls)}
        env = {
            name: os.environ[f"KVSTORE_MASTER_{name.upper()}"]
            for name in known
            if f"KVSTORE_MASTER_{name.upper()}" in os.environ
        }
        for source in (env, overrides):
            for name, raw in source.items():
                if name not in known:
                    raise InvalidArgumentError(f"unknown master setting {name!r}")
                current = 0 if name == "http_port" else getattr(config, name)  # an int, or None
                setattr(config, name, None if raw is None else coerce_setting(name, raw, current))
        config.validate()
        return config
