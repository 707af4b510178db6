"""Stand-in for lmcache.v1.storage_backend.connector (LMCache 0.5.6): adapter base and context."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


def extract_plugin_type(plugin_name: str) -> str:
    return plugin_name.split(".", 1)[0]


class ConnectorContext:
    def __init__(
        self,
        url: str,
        loop: Any,
        local_cpu_backend: Any,
        config: Any,
        metadata: Any,
        plugin_name: str | None = None,
    ) -> None:
        self.url = url
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.config = config
        self.metadata = metadata
        self.plugin_name = plugin_name


class ConnectorAdapter(ABC):
    def __init__(self, schema: str = "") -> None:
        self.schema = schema

    def can_parse(self, url: str) -> bool:
        return self.schema != "" and url.startswith(self.schema)

    @abstractmethod
    def create_connector(self, context: ConnectorContext) -> Any: ...
