"""The store client's configuration: `KVSTORE_*` variables, its transfer engine's included."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvstore.config.component import Component
from kvstore.errors import InvalidArgumentError
from kvstore.rpc import parse_address
from kvstore.rpc.etcd import check_cluster, parse_endpoints
from transfer_engine.config import EngineConfig
from transfer_engine.settings import Origin, SettingInfo, setting


@dataclass
class StoreConfig(Component):
    """A `Store` client. Engine settings (host, transport, tcp_connections, ...) may be given here too:
    they go to the client's transfer engine."""

    master: str = setting(
        "",
        "HOST:PORT of the master, or a comma-separated list of a cluster's masters (the leader is the one "
        "that accepts); a cluster split over shards lists each shard's in shard order, ';'-separated "
        "(kvstore.cluster.shards). Store.connect's argument wins.",
    )
    etcd: str = setting(
        "", "HOST:PORT[,HOST:PORT...] of etcd: the master is the leader it names for `cluster` (HA)."
    )
    cluster: str = setting("default", "The cluster whose leader etcd names (with `etcd`).")
    segment_size: int = setting(0, "Bytes of memory this client contributes to the pool (0: none).", "size")
    buffer_size: int = setting(
        64 << 20, "Pre-faulted staging area for buffers that are not registered.", "size"
    )
    gpu_pipeline_chunk: int = setting(
        32 << 20,
        "Batches of GPU values larger than this move in chunks of about this many bytes, so the copies "
        "between GPU and host staging overlap the network (a put's chunks are separate master requests); "
        "0: whole batches.",
        "size",
    )
    replicas: int = setting(1, "Replicas per put unless a put asks otherwise.")
    min_replicas: int = setting(
        0,
        "Fewest replicas a put accepts when too few distinct usable segments exist for all it asks for "
        "(it is then stored degraded, and says so per key); 0: all or an error naming the cause.",
    )
    namespace: str = setting(
        "",
        "Key namespace of the engine connectors (vLLM, SGLang, LMCache): caches in different namespaces "
        "never share blocks; empty: derived from the model and its KV layout.",
    )
    disk_direct_reads: bool = setting(
        True,
        "Read objects that are only on a disk tier of this host straight from its file (else the disk's "
        "node loads them into its memory first).",
    )
    rpc_timeout: float = setting(10.0, "Seconds to wait for a master reply.", "seconds")
    lease_cache_entries: int = setting(
        1 << 18,
        "Most replica locations this client keeps while their read lease lasts (kvstore.client.lease_cache: "
        "a get of a key located within half the lease skips the master), the oldest dropped first. Entries "
        "last only half the lease (2.5 s at the master's default lease_ttl), so a cache is as large as the "
        "keys read in that time, up to this bound: 262,144 holds 2.5 s of a client reading 100k keys/s. "
        "An entry (one replica's location, key included) takes about 0.75 KiB: 190 MiB at the bound, "
        "which an idle client drops within about a minute of heartbeats. 65,536 (the old fixed size) cut "
        "1 KiB gets from 79.5k/s to 30k/s when the keys read in half a lease outnumbered it.",
    )
    load_deadline_ms: int = setting(
        0,
        "The engine connectors' load budget (vLLM, SGLang, LMCache; connector key load_deadline_ms): a "
        "block whose bytes did not arrive verified this many milliseconds after its load batch started is a "
        "load error the engine recomputes, so a slow or dead node costs at most this; 0: no deadline.",
    )
    head_split: int = setting(
        0,
        "Members (head slices) per block of each attention KV cache group the vLLM connector stores "
        "(connector key head_split): a positive divisor of the model's KV heads that every TP size of the "
        "deployment divides (a rank reads whole members), like vLLM Mooncake's store_tp_size; fewer "
        "members, fewer objects per block. Deployments sharing a store must agree on it (the largest TP "
        "size among them, or the default): other splits never read each other's members. MLA and state "
        "groups keep their own counts. 0: one member per KV head (every TP size reads it).",
    )
    rpc_busy_poll_us: int = setting(
        100,
        "Microseconds to poll for a master reply before sleeping (a wake-up costs tens of µs on a VM); "
        "0 when the master runs in this process (it needs the GIL).",
    )
    admin_secret_file: str = setting(
        "",
        "A file (owner-only) holding the admin secret the master is given "
        "(KVSTORE_MASTER_ADMIN_SECRET_FILE): with it this client may remove_all and force the removal of "
        "what others wrote (kvstore.rpc.admin).",
    )
    admin_secret: str = setting(
        "", "The admin secret itself (prefer admin_secret_file: the environment leaks).", "secret"
    )
    engine: EngineConfig = field(default_factory=EngineConfig)
    # Not a setting: the shard of its cluster these settings reach, (shard, shards)
    # (kvstore.cluster.shards.shard_configs): the master's Hello reply must say the same, or the client
    # refuses it (its routing and the master's part of the key space differ).
    shard: tuple[int, int] = (0, 1)

    @classmethod
    def settings(cls) -> Iterator[SettingInfo]:
        yield from cls.field_settings()
        yield from EngineConfig.settings()

    def apply_all(self, env: Mapping[str, str], overrides: Mapping[str, Any]) -> None:
        own = {s.name for s in self.field_settings()}
        super().apply_all(env, {k: v for k, v in overrides.items() if k in own})
        rest = {k: v for k, v in overrides.items() if k not in own and k != "engine"}
        engine_names = {s.name for s in EngineConfig.settings()} if rest else set()
        for name in rest:
            if name not in engine_names:
                raise InvalidArgumentError(
                    f"unknown setting {name!r} (neither a store client nor an engine setting)"
                )
        engine = overrides.get("engine")
        if isinstance(engine, EngineConfig):
            self.engine = engine
        else:
            own_variables = {s.variable for s in self.field_settings()}
            self.engine.apply_all({k: v for k, v in env.items() if k not in own_variables}, rest)
        self.engine.validate()

    def origin(self, name: str) -> Origin:
        own = {s.name for s in self.field_settings()}
        return super().origin(name) if name in own else self.engine.origin(name)

    def validate(self) -> None:
        if not 1 <= self.replicas <= 64:
            raise InvalidArgumentError(f"replicas must be 1..64, got {self.replicas}")
        if not 0 <= self.min_replicas <= 64:
            raise InvalidArgumentError(f"min_replicas must be 0..64, got {self.min_replicas}")
        if self.buffer_size < 4096:
            raise InvalidArgumentError("buffer_size must be at least 4KiB")
        if not 0 <= self.rpc_busy_poll_us <= 100_000:
            raise InvalidArgumentError("rpc_busy_poll_us must be 0..100000")
        if not 0 < self.rpc_timeout <= 3600:
            raise InvalidArgumentError("rpc_timeout must be positive (seconds)")
        if not 1 <= self.lease_cache_entries <= 1 << 30:
            raise InvalidArgumentError(
                f"lease_cache_entries must be 1 .. {1 << 30}, got {self.lease_cache_entries}"
            )
        if not 0 <= self.load_deadline_ms <= 3_600_000:
            raise InvalidArgumentError(
                f"load_deadline_ms must be 0 (none) .. 3600000 milliseconds, got {self.load_deadline_ms}"
            )
        if not 0 <= self.head_split <= 65536:
            raise InvalidArgumentError(
                f"head_split must be 0 (one member per KV head) or a positive divisor of the model's KV "
                f"heads, got {self.head_split}"
            )
        for address in self.master.replace(";", ",").split(","):  # (each shard's list, ';'-separated)
            if address.strip():
                parse_address(address.strip())
        if self.etcd:
            parse_endpoints(self.etcd)
            check_cluster(self.cluster)
