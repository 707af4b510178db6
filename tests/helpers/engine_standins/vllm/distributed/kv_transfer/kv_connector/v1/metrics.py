"""Stand-in for vllm.distributed.kv_transfer.kv_connector.v1.metrics: the stats base class."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KVConnectorStats:
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return self.data
