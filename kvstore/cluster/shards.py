"""Masters by shard: which master holds a key when the key space is split over S masters.

A cluster of S shards is S independent masters, each with the HA of one (a leader and standbys, the
nodes' holds to rebuild from). Without etcd the shards are a static list in shard order, separated by
';' (each part is one shard's address list, as one master's is today: "h:1,h:2;h:3,h:4" is two shards,
each with a leader and a standby). With etcd, the cluster's shard map (kvstore.rpc.etcd.shards_key,
written by its masters: `kvstore master --shard I --shards S`) says S, and shard i elects its leader
under its own name (kvstore.rpc.etcd.shard_cluster), so a failover stays within its shard.

A key's shard is the unseeded xxh3-64 of its UTF-8 bytes mod S (a store group's member: of its
group's name, so a group lives on one master): a pure function every client agrees on, and the only
kind a plain get(key) can apply (a block key names no ancestor, so routing by a prefix chain's ancestor
would send put_blocks and get to different masters). The rule is kvstore.rpc.shard_keys', which
every sharded master checks its puts against. One shard is today's cluster.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from kvstore.cluster.leader import EtcdLeader
from kvstore.config import StoreConfig
from kvstore.config.etcd import EtcdConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError, KVStoreError, MasterUnavailableError
from kvstore.rpc import etcd
from kvstore.rpc.etcd_records import Records
from kvstore.rpc.shard_keys import routing_key, shard_of, shards_of

SHARD_SEPARATOR = ";"
__all__ = [  # (routing_key and shard_of are the protocol's rule, kvstore.rpc.shard_keys, named here too)
    "SHARD_SEPARATOR",
    "etcd_locator",
    "etcd_shards",
    "routing_key",
    "shard_configs",
    "shard_of",
    "split_by_shard",
    "split_shards",
]

log = logging.getLogger("kvstore.cluster")


def split_shards(master: str) -> list[str]:
    """The shards' address lists of a master setting, in shard order ("a" is one shard, "a;b" two)."""
    parts = [part.strip() for part in master.split(SHARD_SEPARATOR)]
    if len(parts) > 1 and not all(parts):
        raise InvalidArgumentError(f"an empty shard in the master list {master!r} (shards are ';'-separated)")
    etcd.shard_cluster("-", 0, len(parts))  # (checks the count)
    return parts


def shard_configs(config: StoreConfig, where: EtcdLeader | None = None) -> list[StoreConfig]:
    """The settings that reach each shard's master, in shard order: [config] for one shard (today's
    cluster, unchanged). etcd's shard map is read once, here. Each names its shard (StoreConfig.shard),
    which its master's Hello reply must name too (kvstore.cluster.master_client): a client whose list
    differs from the masters' own (',' for ';', another order, one shard of several) is refused rather
    than store keys where other clients never look. A shard's own settings are already one shard.
    `where`: the locator of config's etcd cluster, whose connection reads the map (else one of its own)."""
    if config.shard[1] > 1:
        return [config]
    if config.etcd:
        shards = etcd_shards(config.etcd, config.cluster, min(config.rpc_timeout, 2.0), where)
        if shards == 1:
            return [config]
        return [
            dataclasses.replace(
                config, cluster=etcd.shard_cluster(config.cluster, i, shards), shard=(i, shards)
            )
            for i in range(shards)
        ]
    parts = split_shards(config.master)
    if len(parts) == 1:
        return [config]
    return [
        dataclasses.replace(config, master=address, shard=(i, len(parts))) for i, address in enumerate(parts)
    ]


def etcd_locator(config: StoreConfig) -> EtcdLeader | None:
    """The locator of config's etcd cluster (None without etcd), for shard_configs to read the map with
    and a Session to follow the leader with: one etcd connection for both."""
    if not config.etcd or config.shard[1] > 1:
        return None
    return EtcdLeader(config.etcd, config.cluster or "default", min(config.rpc_timeout, 2.0))


def etcd_shards(endpoints: str, cluster: str, timeout: float, where: EtcdLeader | None = None) -> int:
    """How many shards etcd's shard map gives `cluster` (no map: one). A map that does not verify
    (kvstore.rpc.etcd_records: not signed with this cluster's secret) is refused, and so is an etcd
    that cannot be read: guessing one shard would route every key of a sharded cluster to shard 0."""
    try:
        value = _read(endpoints, timeout, etcd.shards_key(cluster), where)
    except KVStoreError:  # (its TLS or login settings: said as they are)
        raise
    except Exception as exc:  # grpc errors of every kind: etcd cannot be asked now
        raise MasterUnavailableError(
            f"cannot read the shard map of cluster {cluster!r} from etcd {endpoints}: {etcd.explain(exc)}"
        ) from exc
    if value is None:
        return 1
    shards = Records(SecurityConfig.load().secret(), cluster).decode_shards(value)
    if shards is None:
        raise MasterUnavailableError(
            f"the shard map of cluster {cluster!r} in etcd does not verify (not signed with this cluster's "
            "secret, or not a count): no shard to route keys to"
        )
    return shards


def _read(endpoints: str, timeout: float, key: str, where: EtcdLeader | None) -> bytes | None:
    if where is not None:  # (the connection the client then finds its leader with)
        return where.read(key)
    client = etcd.connect(endpoints, timeout, EtcdConfig.load())
    try:
        value, _ = client.get(key)
        return value
    finally:
        client.close()


def split_by_shard(keys: Sequence[str], shards: int) -> list[list[int]]:
    """The positions of `keys` each shard holds, in key order within each shard (the batch hashed in one
    call: kvstore.rpc.shard_keys.shards_of, the rule masters check puts against)."""
    if shards == 1:
        return [list(range(len(keys)))]
    owners = shards_of(keys, shards)
    return [np.flatnonzero(owners == shard).tolist() for shard in range(shards)]
