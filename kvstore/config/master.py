"""Master configuration: `KVSTORE_MASTER_*` variables (code beats environment beats defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvstore.config.component import Component
from kvstore.errors import InvalidArgumentError
from kvstore.rpc.etcd import MAX_SHARDS, check_cluster, parse_endpoints
from transfer_engine.settings import setting

# The eviction policies a master can run (kvstore.master.planners.eviction.POLICIES, which loads the C++
# table: named here so that the config and `kvstore master --help` can check and list them without it).
EVICTION_POLICIES = ("adaptive", "lru")

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")  # bind every address: never an address to publish


def unpublishable(host: str) -> str:
    """Why a master bound to every address (`host`) cannot publish it into etcd, and what to do."""
    return (
        f"--host {host!r} listens on every address, which is no address to publish into etcd as the "
        "leader's: set --advertise-host (KVSTORE_MASTER_ADVERTISE_HOST) to the address clients and nodes "
        "reach this master at"
    )


def _plain_host(host: str) -> bool:
    """A host name or an IP (v6 without brackets), without a port or spaces."""
    bare = host.strip("[]") if host.startswith("[") else host
    if ":" in bare:  # IPv6: only hex digits, ':' and '.' (an embedded v4)
        return all(c in "0123456789abcdefABCDEF:." for c in bare)
    return all(c.isalnum() or c in ".-_" for c in bare)


@dataclass
class MasterConfig(Component):
    """The metadata master."""

    ENV_PREFIX: ClassVar[str] = "KVSTORE_MASTER_"

    host: str = setting("127.0.0.1", "Address the RPC server listens on.")
    advertise_host: str = setting(
        "",
        "Address clients and nodes reach this master at: published into etcd as the leader's (and told by "
        "`kvstore status`). Needed when `host` is a wildcard (0.0.0.0, ::), which cannot be published; "
        "empty: `host` itself.",
    )
    port: int = setting(50051, "RPC port; 0 picks a free one (embedded masters always do).", "port")
    http_port: int | None = setting(
        None,
        "Port for /metrics and /health; unset disables HTTP, 0 picks a free port.",
        "port",
        optional=True,
    )
    kv_events_endpoint: str = setting(
        "",
        "ZMQ endpoint (ipc://PATH, or tcp://127.0.0.1:PORT with kv_events_tcp) the master publishes the "
        "store's KV events on: stored/removed per object key, medium cpu or disk (kvstore.master.kv_events); "
        "an ipc socket is mode 0600 (the master's user only); empty: none.",
    )
    kv_events_tcp: bool = setting(
        False,
        "Allow a tcp:// KV events endpoint: every user of the host (beyond loopback: of the network, with "
        "insecure) may subscribe and learn every object key.",
    )
    kv_events_backend: str = setting("kvstore", "The events' backend_id (who holds the blocks).")
    client_ttl: float = setting(
        10.0,
        "Seconds without a heartbeat after which a client's segments and replicas are dropped.",
        "seconds",
    )
    heartbeat_interval: float = setting(1.0, "How often clients are told to heartbeat.", "seconds")
    lease_ttl: float = setting(
        5.0, "Seconds a get keeps an object safe from eviction and removal.", "seconds"
    )
    put_timeout: float = setting(
        30.0, "A put started and neither ended nor revoked by then is reclaimed.", "seconds"
    )
    high_watermark: float = setting(0.95, "Usage above which background eviction starts.")
    low_watermark: float = setting(0.85, "Usage background eviction brings the pool down to.")
    eviction_policy: str = setting(
        "adaptive",
        "Which objects eviction takes first: lru (least recently used) or adaptive (LRU, but new keys "
        "enter at the cold end while a sampled shadow cache shows that hits more: scan-resistant).",
    )
    demote_watermark: float = setting(
        0.7, "Memory usage above which the objects eviction would take next are copied to a disk tier."
    )
    disk_tasks: int = setting(64, "Demotions in flight at most (disk work the master hands to nodes).")
    disk_task_timeout: float = setting(
        30.0, "Seconds a node has for one disk order before the master gives up on it.", "seconds"
    )
    promote_window: float = setting(
        60.0,
        "An object loaded from disk stays in memory (promoted) when read again within this many seconds; "
        "after a single read its memory copy is the first to go.",
        "seconds",
    )
    disk_read_wait: float = setting(
        2.0, "Seconds a read of an object only on disk waits for its load; then it is a miss.", "seconds"
    )
    put_room_wait: float = setting(
        1.0,
        "Seconds a put may wait, in all, for room on its way (an object being demoted to disk, freed "
        "allocations being fenced by their node) before it evicts anyway.",
        "seconds",
    )
    durable_wait: float = setting(
        2.0,
        "Seconds a put's end (a removal) waits for the nodes of its replicas to record that they hold "
        "it (forgot it): a restarted or newly elected master rebuilds the cache from what they name. "
        "Past it the call is acknowledged anyway. 0: at once (faster; a master killed right then may "
        "lose the put, or the removed object may come back).",
        "seconds",
    )
    client_put_objects: int = setting(
        16384,
        "Objects one client may have in progress (put started, neither ended nor revoked); more fail "
        "with TooManyPutsError. Also never more than half of all segments' fence slots, so one client "
        "cannot take every allocation slot.",
    )
    client_put_bytes: int = setting(
        0,
        "Bytes one client's puts in progress may hold in all (per replica); 0: half of the pool's "
        "capacity. Over it, puts fail with TooManyPutsError and evict nothing.",
        "size",
    )
    max_replicas: int = setting(8, "Most replicas one object may have.")
    max_unauthenticated: int = setting(
        256,
        "Connections still proving the cluster secret held at once; a new one beyond it evicts the oldest "
        "(a flood of idle sockets never locks out a peer that authenticates).",
    )
    max_connections_per_peer: int = setting(
        4096,
        "Authenticated connections from one host at once; a new one beyond it takes the place of that "
        "host's connection idle longest (its client reconnects at its next call), and only when none is "
        "idle gets TooManyConnectionsError.",
    )
    max_connections: int = setting(
        0,
        "Authenticated connections at once, over all hosts; beyond it a new one takes the place of the "
        "connection idle longest of the host holding the most. 0: as many as RLIMIT_NOFILE allows (the "
        "master raises it to its hard limit and keeps 64 descriptors for itself).",
    )
    idle_timeout: float = setting(
        300.0,
        "An authenticated connection with nothing owed to it and no request for this long is closed (clients "
        "reconnect at their next call; a client's heartbeat and a node's work poll keep theirs busy).",
        "seconds",
    )
    verify_mounts: bool = setting(
        True,
        "Check each segment mount against the engine it names (through its authenticated handshake: the "
        "mounting client owns it and it exports the region, at least that size) before placing on it; "
        "off only where the master cannot reach the nodes' handshake ports.",
    )
    frame_timeout: float = setting(
        10.0,
        "A request frame begun must arrive whole within this; a connection that leaves one half-sent longer "
        "is cut (its buffered bytes freed).",
        "seconds",
    )
    max_buffered: int = setting(
        256 << 20,
        "Bytes of request frames still arriving the master holds over all connections; a connection that "
        "would take it past this is cut (with frame_timeout, no peer holds the master's memory for long).",
        "size",
    )
    allocation_alignment: int = setting(64, "Replica offsets are multiples of this.")
    hot_access_rate: float = setting(20.0, "Accesses per second above which a key gains replicas.")
    cool_access_rate: float = setting(2.0, "Accesses per second below which a key's extra replicas go.")
    max_hot_replicas: int = setting(3, "Replicas a hot key grows to (bounded by the number of segments).")
    heat_half_life: float = setting(5.0, "Seconds over which a key's access count halves.", "seconds")
    busy_poll_us: int = setting(
        200,
        "Microseconds the event loop polls for the next request before sleeping (a sleeping process takes "
        "~80 µs to wake on a VM), while requests do come that soon; 0 for a master sharing its process "
        "(and GIL) with clients.",
    )
    admin_secret_file: str = setting(
        "",
        "A file (owner-only) holding the admin secret: remove_all, and forced removals of what other "
        "clients wrote, are allowed to clients that prove it (kvstore.rpc.admin); unset: to nobody "
        "(`kvstore secret new PATH` makes one).",
    )
    admin_secret: str = setting(
        "", "The admin secret itself (prefer admin_secret_file: the environment leaks).", "secret"
    )
    max_clients: int = setting(
        8192,
        "Clients registered at once. A registration beyond it drops the longest-silent client that holds "
        "nothing (no segment, no put in progress) and has missed a heartbeat; if none, the address holding "
        "the most registrations gives up one that holds nothing when it holds more than the newcomer's "
        "would; else it is refused.",
    )
    max_clients_per_host: int = setting(
        1024,
        "Clients registered at once from one address (the connection's peer, not the host a client names: "
        "clients behind one NAT share it); beyond it the longest-silent idle one of that address goes, "
        "else the registration is refused.",
    )

    etcd: str = setting(
        "",
        "HOST:PORT[,HOST:PORT...] of etcd: this master is a candidate of `cluster` and serves only while "
        "it leads (leader election; clients and nodes follow the leader). Empty: a single master.",
    )
    cluster: str = setting("default", "The cluster this master is a candidate of (with `etcd`).")
    leader_ttl: int = setting(
        3,
        "Seconds of the leader's etcd lease: a leader that cannot renew it stops serving before it ends, "
        "and a standby leads once it has (a failover takes about this long).",
    )

    shard: int = setting(
        0,
        "Which shard of `shards` this master serves (0..shards-1): with `etcd`, the shard's masters elect "
        "their leader apart from the other shards' (under '<cluster>.shard-<i>'); told to clients in Hello's "
        "reply.",
    )
    shards: int = setting(
        1,
        f"How many shards the cluster's key space is split over (1..{MAX_SHARDS}; 1: one master): run one "
        "master (or leader and standbys) per shard, each with its `shard`, all of one `cluster`.",
    )

    @property
    def shard_of(self) -> tuple[int, int]:
        """(shard, shards): the part of the cluster's key space this master serves."""
        return self.shard, self.shards

    def validate(self) -> None:
        if self.etcd:
            parse_endpoints(self.etcd)
            check_cluster(self.cluster)
        if self.etcd and not self.advertise_host and self.host in WILDCARD_HOSTS:
            raise InvalidArgumentError(unpublishable(self.host))
        if self.advertise_host and (
            self.advertise_host in WILDCARD_HOSTS or not _plain_host(self.advertise_host)
        ):
            raise InvalidArgumentError(
                f"advertise_host must be an address others reach this master at (a host name or IP, no "
                f"port), not {self.advertise_host!r}"
            )
        if not 0 <= self.shard < self.shards <= MAX_SHARDS:
            raise InvalidArgumentError(
                f"shard must be 0..shards-1 and shards 1..{MAX_SHARDS} (--shard/KVSTORE_MASTER_SHARD, "
                f"--shards/KVSTORE_MASTER_SHARDS): got shard {self.shard} of {self.shards}"
            )
        if not 2 <= self.leader_ttl <= 60:
            raise InvalidArgumentError("leader_ttl must be 2..60 seconds")
        if not 0 < self.low_watermark <= self.high_watermark <= 1:
            raise InvalidArgumentError("need 0 < low_watermark <= high_watermark <= 1")
        if self.eviction_policy not in EVICTION_POLICIES:
            raise InvalidArgumentError(
                f"unknown eviction_policy {self.eviction_policy!r}; known: {', '.join(EVICTION_POLICIES)}"
            )
        if not 0 < self.demote_watermark <= 1:
            raise InvalidArgumentError("demote_watermark must be in (0, 1]")
        if not self.promote_window >= 0:
            raise InvalidArgumentError("promote_window must not be negative")
        waits = (self.disk_task_timeout, self.disk_read_wait, self.put_room_wait)
        if not 1 <= self.disk_tasks <= 4096 or not all(w > 0 for w in waits):
            raise InvalidArgumentError(
                "disk_tasks must be 1..4096; disk_task_timeout, disk_read_wait, put_room_wait positive"
            )
        if not 0 <= self.durable_wait <= 60:
            raise InvalidArgumentError("durable_wait must be 0..60 seconds")
        for name in ("client_ttl", "heartbeat_interval", "lease_ttl", "put_timeout"):
            if getattr(self, name) <= 0:
                raise InvalidArgumentError(f"{name} must be positive")
        if self.heartbeat_interval >= self.client_ttl:
            raise InvalidArgumentError("heartbeat_interval must be shorter than client_ttl")
        if self.client_put_objects < 1 or self.client_put_bytes < 0:
            raise InvalidArgumentError("client_put_objects must be positive, client_put_bytes not negative")
        if self.max_unauthenticated < 1 or self.max_connections_per_peer < 1 or self.max_connections < 0:
            raise InvalidArgumentError(
                "max_unauthenticated and max_connections_per_peer must be at least 1, max_connections >= 0"
            )
        if self.idle_timeout <= self.heartbeat_interval:
            raise InvalidArgumentError("idle_timeout must be longer than heartbeat_interval")
        if self.frame_timeout <= 0 or self.max_buffered < 1 << 20:
            raise InvalidArgumentError("frame_timeout must be positive and max_buffered at least 1 MiB")
        if not 1 <= self.max_replicas <= 64 or self.allocation_alignment < 1:
            raise InvalidArgumentError("bad max_replicas or allocation_alignment")
        if not 0 <= self.cool_access_rate <= self.hot_access_rate or self.heat_half_life <= 0:
            raise InvalidArgumentError("need 0 <= cool_access_rate <= hot_access_rate and heat_half_life > 0")
        if not 1 <= self.max_hot_replicas <= self.max_replicas:
            raise InvalidArgumentError("max_hot_replicas must be 1..max_replicas")
        if not 0 <= self.busy_poll_us <= 100_000:
            raise InvalidArgumentError("busy_poll_us must be 0..100000")
        if not 1 <= self.max_clients_per_host <= self.max_clients:
            raise InvalidArgumentError("need 1 <= max_clients_per_host <= max_clients")
