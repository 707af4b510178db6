"""Which master `kvstore status` asks, and how to say where that came from.

Given --master or --etcd, those. Otherwise the first of: KVSTORE_MASTER (a client's setting); KVSTORE_ETCD
with KVSTORE_CLUSTER (a client's way to the leader); KVSTORE_MASTER_ETCD with KVSTORE_MASTER_CLUSTER (the
settings of a master run on this host); and last the local master's address, 127.0.0.1 (or
KVSTORE_MASTER_HOST where it names one host) at KVSTORE_MASTER_PORT, else 50051. An operator on a
master's host, or with a client's environment, runs `kvstore status` and it finds the cluster.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from kvstore.config import StoreConfig
from kvstore.config.master import WILDCARD_HOSTS, MasterConfig
from kvstore.errors import InvalidArgumentError

LOCAL_HOST = "127.0.0.1"


@dataclass(frozen=True)
class StatusTarget:
    """The settings status reaches its master with, and what they came from (None: the options)."""

    config: StoreConfig
    source: str | None


def status_target(master: str | None, etcd: str | None, cluster: str | None) -> StatusTarget:
    """The options' master or etcd (None where not given), else the environment's, else the local
    master's address."""
    env = os.environ
    if master is not None or etcd is not None:
        return StatusTarget(StoreConfig.load(**_given(master=master, etcd=etcd, cluster=cluster)), None)
    if env.get("KVSTORE_MASTER"):  # (over KVSTORE_ETCD, which a Store would follow instead)
        config = StoreConfig.load(etcd="", **_given(cluster=cluster))
        return StatusTarget(config, f"KVSTORE_MASTER={config.master}")
    if env.get("KVSTORE_ETCD"):
        config = StoreConfig.load(**_given(cluster=cluster))
        return StatusTarget(config, f"KVSTORE_ETCD={config.etcd}, cluster {config.cluster}")
    if env.get("KVSTORE_MASTER_ETCD"):
        etcd = env["KVSTORE_MASTER_ETCD"]
        cluster = cluster or env.get("KVSTORE_MASTER_CLUSTER") or "default"
        config = StoreConfig.load(master="", etcd=etcd, cluster=cluster)
        return StatusTarget(config, f"KVSTORE_MASTER_ETCD={etcd} (this host's master's), cluster {cluster}")
    address = _local_master()
    return StatusTarget(
        StoreConfig.load(master=address, etcd=""),
        f"{address}, the local master's address (no --master, KVSTORE_MASTER or etcd settings)",
    )


def _local_master() -> str:
    """Where a master run on this host with its environment's settings listens."""
    defaults = MasterConfig()
    host = os.environ.get("KVSTORE_MASTER_HOST", "") or LOCAL_HOST
    text = os.environ.get("KVSTORE_MASTER_PORT", "") or str(defaults.port)
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise InvalidArgumentError(f"KVSTORE_MASTER_PORT must be a port (1..65535), not {text!r}")
    host = LOCAL_HOST if host in WILDCARD_HOSTS else host.strip("[]")
    return f"[{host}]:{text}" if ":" in host else f"{host}:{text}"


def _given(**options: str | None) -> dict[str, str]:
    return {name: value for name, value in options.items() if value is not None}
