"""Typed configuration of every component, from one loader (transfer_engine.settings).

Precedence everywhere: values given in code (or on the command line) > ``KVSTORE_*`` environment
variables > defaults. An unknown ``KVSTORE_*`` variable or a bad value is an error naming the variable.
``kvstore config`` prints the effective settings and where each came from.
"""

from __future__ import annotations

from kvstore.config.client import StoreConfig
from kvstore.config.environment import check_environment, known_variables
from kvstore.config.etcd import EtcdConfig
from kvstore.config.index import IndexConfig
from kvstore.config.master import MasterConfig
from kvstore.config.node import NodeConfig
from kvstore.config.security import SecurityConfig
from transfer_engine.config import EngineConfig
from transfer_engine.settings import Settings

# Component name -> its config class (the order `kvstore config` prints them in).
COMPONENTS: dict[str, type[Settings]] = {
    "engine": EngineConfig,
    "client": StoreConfig,
    "node": NodeConfig,
    "master": MasterConfig,
    "security": SecurityConfig,
    "index": IndexConfig,
    "etcd": EtcdConfig,
}

__all__ = [
    "COMPONENTS",
    "EngineConfig",
    "EtcdConfig",
    "IndexConfig",
    "MasterConfig",
    "NodeConfig",
    "SecurityConfig",
    "StoreConfig",
    "check_environment",
    "known_variables",
]
