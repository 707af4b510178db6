"""`Store`: the client of the KV-cache store.

Metadata goes to the master in one RPC per batch; bytes move directly between this process and the
nodes holding the replicas, through the transfer engine (same host: shared memory; else TCP).
Every value is checked against its xxh3-64 checksum on read: a mismatch is a miss, never bytes.
Store is the facade: its reads are kvstore.client.reads.Reads (each batch one
kvstore.client.read_batch.ReadBatch), its writes kvstore.client.writes.Writes (in
kvstore.client.put_chunk.PutChunk's), where keys live kvstore.client.locator.Locator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, cast

import numpy as np

from kvstore.client.buffers import BufferManager
from kvstore.client.collector import collector_paused
from kvstore.client.deadline import Deadline
from kvstore.client.disk_reads import DiskReader
from kvstore.client.lease_cache import LeaseCache
from kvstore.client.locator import Locator
from kvstore.client.peer_opening import PeerOpener
from kvstore.client.put_chunk import PutResult
from kvstore.client.read_batch import LATE, MISS, ReadTools
from kvstore.client.reads import Reads
from kvstore.client.replica_reports import ReplicaReports
from kvstore.client.stats import ClientStats
from kvstore.client.transfer_batch import OK
from kvstore.client.writes import PIPELINE_CHUNKS as PIPELINE_CHUNKS
from kvstore.client.writes import PIPELINED_CHUNK as PIPELINED_CHUNK
from kvstore.client.writes import Writes
from kvstore.cluster.master_client import MasterClient
from kvstore.cluster.session import Session
from kvstore.cluster.shards import SHARD_SEPARATOR, etcd_locator, shard_configs
from kvstore.config import StoreConfig
from kvstore.errors import InvalidArgumentError, KVStoreError, error_for_code
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v
from kvstore.rpc.messages import ObjectLocation, PrefixMatch
from transfer_engine import TransferEngine


def result_error(result: int) -> KVStoreError | None:
    """The exception a negative per-key batch result stands for; None for a success (>= 0)."""
    return None if result >= 0 else error_for_code(-result, f"store error {-result}")


class Store:
    """Thread-safe client. Create with :meth:`connect` (a running master); `kvstore.Store.embedded` also
    starts a master in this process."""

    def __init__(self, session: Session, roles: Sequence[Closable] = ()) -> None:
        self.session = session
        self.config = session.config
        self.stats_local = ClientStats()
        self.reports = ReplicaReports(session)  # engines this process could not reach, corrupt replicas
        self._roles = list(roles)  # what else runs on this session and closes with it (a storage node...)
        self._after: list[Closable] = []
        self.buffers = BufferManager(
            session.engine, session.config.buffer_size, session.config.gpu_pipeline_chunk
        )
        self.disk_reads = DiskReader()
        self.peers = PeerOpener(session.peer)  # (a read with a deadline waits for a handshake only so long)
        self.leases = LeaseCache(float(session.terms.lease_ttl), session.config.lease_cache_entries)
        session.on_heartbeat(lambda: {"touched": self.leases.take_touches() or None})
        self.locator = Locator(session, self.leases)
        tools = ReadTools(
            engine=session.engine,
            peers=self.peers,
            locator=self.locator,
            reports=self.reports,
            disk_reads=self.disk_reads,
            stats=self.stats_local,
        )
        self.reads = Reads(tools, self.buffers)
        self.writes = Writes(session, self.buffers, self.reports, self.stats_local)

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def connect(
        cls: type[S],
        master: str | None = None,
        *,
        etcd: str | None = None,
        cluster: str | None = None,
        **settings: Any,
    ) -> S:
        """Joins the cluster of the master at HOST:PORT (else KVSTORE_MASTER), or of the masters at
        "HOST:PORT,HOST:PORT" (the leader among them), or of the leader etcd names for `cluster`
        (etcd="HOST:PORT[,...]", else KVSTORE_ETCD and KVSTORE_CLUSTER): calls follow a new leader.
        A cluster split over shards ("A;B" in shard order, or etcd's shard map for `cluster`) gives a
        kvstore.client.sharded.ShardedStore: the same data operations, each key routed to its shard.

        `settings` are StoreConfig fields (segment_size: bytes this process contributes, buffer_size,
        replicas, rpc_timeout) or engine settings (host, transport, tcp_connections, ...); what is not
        given comes from KVSTORE_* variables, then defaults.
        """
        if master is not None:
            settings["master"] = master
        if etcd is not None:
            settings["etcd"] = etcd
        if cluster is not None:
            settings["cluster"] = cluster
        config = StoreConfig.load(**settings)
        return cls.from_config(config)

    @classmethod
    def from_config(cls: type[S], config: StoreConfig) -> S:
        with contextlib.ExitStack() as guard:  # (closes the etcd connection unless the session took it)
            where = None
            if config.etcd or SHARD_SEPARATOR in config.master:  # maybe a cluster split over shards
                where = etcd_locator(config)  # (one etcd connection reads the shard map and finds the leader)
                if where is not None:
                    guard.callback(where.close)
                shards = shard_configs(config, where)
                if len(shards) > 1:  # one Store per shard, each key routed to its own
                    from kvstore.client.sharded import ShardedStore  # (it builds on this module)

                    return cast(S, ShardedStore.join(cls, shards, config))  # (Store's data operations)
            session = Session(config, where=where)
            guard.pop_all()
        roles: list[Closable] = []
        try:
            roles = cls.start_roles(session, config)
            store = cls(session, roles)
        except BaseException:
            for role in reversed(roles):
                role.close()
            session.close()
            raise
        session.start()
        return store

    @classmethod
    def start_roles(cls, session: Session, config: StoreConfig) -> list[Closable]:
        """What else this process does on its session. A bare client does nothing else: contributing
        memory is the storage node's role (kvstore.Store, or `kvstore node`)."""
        if config.segment_size:
            raise InvalidArgumentError(
                "kvstore.client.Store does not contribute memory; use kvstore.Store (client and storage "
                "node) or run `kvstore node`"
            )
        return []

    def add_role(self, role: Closable) -> None:
        """Something else that closes with this store, after its session (e.g. an embedded master)."""
        self._after.append(role)

    def close(self) -> None:
        if self.session.closed:
            return
        for role in self._roles:
            role.close()
        self.peers.close()
        self.session.close()
        self.buffers.close()
        self.disk_reads.close()
        for role in self._after:
            role.close()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def master(self) -> MasterClient:
        return self.session.master

    @property
    def engine(self) -> TransferEngine:
        return self.session.engine

    @property
    def client_id(self) -> str:
        return self.session.client_id

    @property
    def host_id(self) -> str:
        return self.session.host_id

    @property
    def master_address(self) -> str:
        return self.master.address

    def change_replica(self, key: str, replicas: int) -> None:
        """Asks for exactly `replicas` copies of key (0: back to automatic, by how hot it is)."""
        self.master.call(m.ChangeReplica(key=key, replicas=replicas))

    # -- buffers --------------------------------------------------------------------------------------
    def register_buffer(self, buffer: Any) -> None:
        """Registers memory once so gets and puts on it move bytes with no copy and no per-call work."""
        self.buffers.register(buffer)

    def unregister_buffer(self, buffer: Any) -> None:
        self.buffers.unregister(buffer)

    # -- puts -----------------------------------------------------------------------------------------
    def put(
        self,
        key: str,
        value: bytes | bytearray | memoryview | np.ndarray,
        *,
        replicas: int | None = None,
        pin: bool = False,
    ) -> None:
        """Stores value under key; raises on failure (ObjectExistsError for a different value)."""
        result = self.writes.put([key], [[value]], replicas, pin)[0]
        if result.code < 0:
            raise error_for_code(-result.code, result.message or f"put of {key!r} failed")

    def put_from(self, key: str, buffer: Any, *, replicas: int | None = None, pin: bool = False) -> None:
        self.put(key, buffer, replicas=replicas, pin=pin)

    def batch_put_from(
        self, keys: Sequence[str], buffers: Sequence[Any], *, replicas: int | None = None, pin: bool = False
    ) -> list[int]:
        """Per key: 0 when stored (or already stored with the same bytes), else a negative error code."""
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffers differ in length")
        return self.batch_put_from_multi_buffers(keys, [[b] for b in buffers], replicas=replicas, pin=pin)

    def batch_put_from_multi_buffers(
        self,
        keys: Sequence[str],
        buffer_lists: Sequence[Sequence[Any]],
        *,
        replicas: int | None = None,
        pin: bool = False,
    ) -> list[int]:
        """Each key's value is the concatenation of its buffers (e.g. one per layer, or K and V)."""
        return [r.code for r in self.writes.put(keys, buffer_lists, replicas, pin)]

    def batch_put_detailed(
        self,
        keys: Sequence[str],
        buffer_lists: Sequence[Sequence[Any]],
        *,
        replicas: int | None = None,
        min_replicas: int | None = None,
        pin: bool = False,
    ) -> list[PutResult]:
        """As batch_put_from_multi_buffers, with each key's full outcome: how many replicas were written
        (a degraded put wrote fewer than asked) and why a key failed. `min_replicas` (default: the
        StoreConfig's) lets a put store fewer replicas than asked, down to it, when fewer distinct usable
        segments exist; without it such a put fails with NotEnoughSegmentsError."""
        return self.writes.put(keys, buffer_lists, replicas, pin, min_replicas)

    def batch_put_from_pieces(
        self,
        keys: Sequence[str],
        addrs: Any,
        lengths: Any,
        counts: Any,
        *,
        replicas: int | None = None,
        pin: bool = False,
    ) -> list[int]:
        """batch_put_from_multi_buffers with every key's buffers given as flat arrays, as a paged KV cache
        computes them: key i's value is its counts[i] next (addrs, lengths) pieces, in order, each inside
        memory registered as raw (address, size). One array operation per batch where a list of tuples
        per key cost a Python step per piece."""
        if len(keys) != len(counts):
            raise InvalidArgumentError("one piece count per key")
        values = self.buffers.piece_values(addrs, lengths, counts, writable=False)
        return [r.code for r in self.writes.put(keys, values, replicas, pin)]

    # -- gets -----------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        """The value, or None on a miss."""
        return self.batch_get([key])[0]

    @collector_paused
    def batch_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values (None for misses), read through the pre-faulted staging area, one metadata RPC."""
        return self.reads.get(keys)

    def get_into(self, key: str, buffer: Any) -> int:
        """Bytes read into buffer, or a negative code (MISS when absent)."""
        return self.batch_get_into([key], [buffer])[0]

    def batch_get_into(
        self, keys: Sequence[str], buffers: Sequence[Any], *, deadline: float | None = None
    ) -> list[int]:
        """Per key: bytes read, or a negative code (MISS for absent or unreadable keys; LATE for keys not
        read by `deadline`, see batch_get_into_multi_buffers)."""
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffers differ in length")
        return self.batch_get_into_multi_buffers(keys, [[b] for b in buffers], deadline=deadline)

    @collector_paused
    def batch_get_into_multi_buffers(
        self, keys: Sequence[str], buffer_lists: Sequence[Sequence[Any]], *, deadline: float | None = None
    ) -> list[int]:
        """Each key's value is spread over its buffers in order.

        `deadline`: seconds from this call (None: none) by which a key's bytes must have arrived and
        verified; a key that did not is LATE (DeadlineExceededError's code), is not tried on another
        replica, and no byte of it lands in its buffers after this returns (the engine fences its
        requests off; what they landed before is left, not cleared: the result says it is no value). The
        master lookup is bounded by rpc_timeout, not by the deadline."""
        until = Deadline.after(deadline)
        if len(keys) != len(buffer_lists):
            raise InvalidArgumentError("keys and buffer lists differ in length")
        found, cached = self.locator.locate(list(keys))
        return self.reads.get_into(list(keys), buffer_lists, found, cached, until)

    @collector_paused
    def batch_get_into_pieces(
        self, keys: Sequence[str], addrs: Any, lengths: Any, counts: Any, *, deadline: float | None = None
    ) -> list[int]:
        """batch_get_into_multi_buffers with every key's buffers given as flat arrays (see
        batch_put_from_pieces): key i's value lands in its counts[i] next (addrs, lengths) pieces.
        `deadline` as for batch_get_into_multi_buffers."""
        until = Deadline.after(deadline)
        if len(keys) != len(counts):
            raise InvalidArgumentError("one piece count per key")
        values = self.buffers.piece_values(addrs, lengths, counts, writable=True)
        found, cached = self.locator.locate(list(keys))
        return self.reads.get_into(list(keys), values, found, cached, until)

    # -- prefix blocks -------------------------------------------------------------------------------
    def put_blocks(self, keys: Sequence[str], buffers: Sequence[Any], **kwargs: Any) -> list[int]:
        """Stores KV blocks (keys from kvstore.blocks.BlockHasher); per key 0 or a negative code."""
        return self.batch_put_from(keys, buffers, **kwargs)

    def put_group(self, group: str, buffers: Sequence[Any], **kwargs: Any) -> list[int]:
        """Stores every member of a store group from this process, member i from buffers[i] (keys
        kvstore.blocks.group_keys(group, len(buffers))): readers see none of them until all are stored,
        and the master evicts and removes them as one. Per member 0 or a negative code."""
        from kvstore.blocks import group_keys

        return self.batch_put_from(group_keys(group, len(buffers)), buffers, **kwargs)

    def get_blocks(
        self, keys: Sequence[str], buffers: Sequence[Any], *, deadline: float | None = None
    ) -> int:
        """Loads the leading run of stored blocks into buffers; returns how many leading blocks loaded.

        A block is worthless without its prefix, so blocks after the first miss are not fetched.
        `deadline`: seconds from this call; the run ends at the first block whose bytes had not arrived
        verified by then, and no byte lands in any buffer after this returns (see
        batch_get_into_multi_buffers).
        """
        until = Deadline.after(deadline)
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffers differ in length")
        found, cached = self.locator.locate(list(keys), prefix=True)
        n = next((i for i, entry in enumerate(found) if entry is None), len(found))
        if n == 0:
            return 0
        results = self.reads.get_into(
            list(keys[:n]), [[b] for b in buffers[:n]], found[:n], cached[:n], until
        )
        loaded = 0
        while loaded < n and results[loaded] >= 0:
            loaded += 1
        return loaded

    def match_prefix(self, keys: Sequence[str]) -> PrefixMatch:
        """The number of leading keys stored (one RPC per 16384 keys), where each lives, and per node its
        leading run:
        a scheduler routes the request to the node with the longest run."""
        keys = list(keys)
        bad = next((i for i, k in enumerate(keys) if not v.key_ok(k)), None)
        if bad is not None:  # no key of that kind is stored: the prefix ends before it
            keys = keys[:bad]
        matched = 0
        replicas: list[list[str]] = []
        per_node: dict[str, int] = {}
        for start in range(0, max(len(keys), 1), v.MAX_KEYS):  # in requests the master bounds
            chunk = keys[start : start + v.MAX_KEYS]
            part: PrefixMatch = self.master.call(m.MatchPrefix(keys=chunk))
            for node, run in part.per_node.items():  # a node's run goes on only if it held every key so far
                if per_node.get(node, 0) == matched:
                    per_node[node] = matched + run
                else:
                    per_node.setdefault(node, 0)
            matched += part.matched
            replicas += part.replicas
            if part.matched < len(chunk):
                break
        return PrefixMatch(matched, replicas, per_node)

    # -- the rest -------------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return bool(self.master.call(m.Exists(keys=[v.key(key)]))[0])

    def get_size(self, key: str) -> int | None:
        """The value's size in bytes, or None when absent (one metadata RPC; like a get, it grants a
        lease and counts as a read)."""
        found: ObjectLocation | None = self.master.call(m.GetReplicas(keys=[v.key(key)]))[0]
        return None if found is None else found.size

    def locate(self, keys: Sequence[str]) -> list[ObjectLocation | None]:
        """Where each key's replicas live (None: absent), from the master. Like a get it grants a read
        lease and counts as a read; the locations are valid while the objects are not removed."""
        keys = list(keys)
        out: list[ObjectLocation | None] = [None] * len(keys)  # a bad key is never stored: None
        asked = [i for i, k in enumerate(keys) if v.key_ok(k)]
        for start in range(0, len(asked), v.MAX_KEYS):  # in requests the master bounds
            chunk = asked[start : start + v.MAX_KEYS]
            reply = self.master.call(m.GetReplicas(keys=[keys[i] for i in chunk]))
            for i, found in zip(chunk, reply, strict=True):
                out[i] = found
        return out

    @collector_paused
    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        """Per key whether it is stored (a key that breaks the key rule never is: False)."""
        keys = list(keys)
        if v.all_keys_ok(keys):  # the common case: no per-key bookkeeping
            out: list[bool] = []
            for start in range(0, len(keys), v.MAX_KEYS):  # in requests the master bounds
                out += self.master.call(m.Exists(keys=keys[start : start + v.MAX_KEYS]))
            return out
        out = [False] * len(keys)
        asked = [i for i, k in enumerate(keys) if v.key_ok(k)]
        for start in range(0, len(asked), v.MAX_KEYS):  # in requests the master bounds
            chunk = asked[start : start + v.MAX_KEYS]
            reply = self.master.call(m.Exists(keys=[keys[i] for i in chunk]))
            for i, there in zip(chunk, reply, strict=True):
                out[i] = bool(there)
        return out

    def remove(self, key: str, *, force: bool = False) -> None:
        """Removes key; ObjectNotFoundError if absent, ObjectBusyError if leased (unless force: of what
        another client wrote, an admin's only, else PermissionDeniedError)."""
        self.leases.drop([key])
        if force:
            self.session.as_admin(required=False)
        request = m.Remove(keys=[v.key(key)], force=force, client_id=self.client_id)
        code, message, _ = self.master.call(request)[0]
        if code:
            raise error_for_code(code, message)

    def batch_remove(self, keys: Sequence[str], *, force: bool = False) -> list[int]:
        """One RPC; per key 0, or a negative code (MISS when absent, busy when leased, permission denied
        when forcing what another client wrote without admin rights)."""
        keys = list(keys)
        asked = [i for i, k in enumerate(keys) if v.key_ok(k)]  # a bad key fails alone, here
        self.leases.drop([keys[i] for i in asked])
        if force and asked:
            self.session.as_admin(required=False)
        out = [-InvalidArgumentError.code] * len(keys)
        for start in range(0, len(asked), v.MAX_KEYS):  # in requests the master bounds
            chunk = asked[start : start + v.MAX_KEYS]
            request = m.Remove(keys=[keys[i] for i in chunk], force=force, client_id=self.client_id)
            for i, r in zip(chunk, self.master.call(request), strict=True):
                out[i] = -r.code
        return out

    def remove_all(self, *, force: bool = False) -> int:
        """Removes every object: an admin's call (StoreConfig.admin_secret_file), else
        PermissionDeniedError."""
        self.leases.clear()
        self.session.as_admin(required=True)
        return int(self.master.call(m.RemoveAll(force=force, client_id=self.client_id)))

    def stats(self) -> dict[str, Any]:
        master = self.master.call(m.Stats())
        return {"master": master, "client": dict(vars(self.stats_local))}


class Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=Store)

__all__ = ["LATE", "MISS", "OK", "PrefixMatch", "PutResult", "Store", "result_error"]
