"""`Store`: the client of the KV-cache store.

Metadata goes to the master in one RPC per batch; bytes move directly between this process and the
nodes holding the replicas, through the transfer engine (same host: shared memory; else TCP).
Every value is checked against its xxh3-64 checksum on read: a mismatch is a miss, never bytes.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from kvstore.client import read_plan
from kvstore.client.buffers import BufferManager, PieceValues, SpanList, ValueBuffers, checksums, ints
from kvstore.client.collector import collector_paused
from kvstore.client.deadline import Deadline, transfer_timeout
from kvstore.client.disk_reads import DiskReader
from kvstore.client.lease_cache import LeaseCache
from kvstore.client.peer_opening import NotInTime, PeerOpener
from kvstore.client.put_chunk import PutChunk, PutResult
from kvstore.client.transfer_batch import OK, STALE, TransferBatch
from kvstore.cluster.master_client import MasterClient, Sent
from kvstore.cluster.session import Session
from kvstore.config import StoreConfig
from kvstore.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    KVStoreError,
    NotFoundError,
    ObjectNotFoundError,
    TransferTimeoutError,
    error_for_code,
)
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v
from kvstore.rpc.messages import ObjectLocation, PrefixMatch, Request
from transfer_engine import Op, Peer, TransferEngine

log = logging.getLogger("kvstore.client")

MISS = -ObjectNotFoundError.code
"""Per-key result of a batch get for a key that is absent (or whose every replica failed its check)."""
LATE = -DeadlineExceededError.code
"""Per-key result of a batch get given a deadline for a key whose bytes did not arrive verified by then."""
PIPELINED_CHUNK = 256  # keys of a batch put's chunk (at least) when the batch is pipelined
PIPELINE_CHUNKS = 4  # chunks a pipelined batch put is cut into (of PIPELINED_CHUNK keys at least)
TIMED_OUT = TransferTimeoutError.code  # a transfer's error code when it was not done by its batch's timeout
AVOID_UNREACHABLE_SECONDS = 10.0  # a node this process could not reach is read from last for this long


def result_error(result: int) -> KVStoreError | None:
    """The exception a negative per-key batch result stands for; None for a success (>= 0)."""
    return None if result >= 0 else error_for_code(-result, f"store error {-result}")


@dataclass
class ClientStats:
    checksum_mismatches: int = 0
    replica_failures: int = 0
    stale_locations: int = 0  # reads a node refused: the object was freed since its location was given
    degraded_puts: int = 0  # stored with fewer replicas than asked (min_replicas)
    gets: int = 0
    hits: int = 0
    puts: int = 0
    disk_reads: int = 0  # hits read straight from a disk tier's file on this host
    disk_read_failures: int = 0  # such reads that failed or did not verify (then the node loaded them)


class Store:
    """Thread-safe client. Create with :meth:`connect` (a running master); `kvstore.Store.embedded` also
    starts a master in this process."""

    def __init__(self, session: Session, roles: Sequence[Closable] = ()) -> None:
        self.session = session
        self.config = session.config
        self.stats_local = ClientStats()
        # engines this process failed to reach -> until when its reads try their replicas last: the master
        # acts on one client's report only once another client or the node's silence confirms it
        self._unreachable: dict[str, float] = {}
        self._roles = list(roles)  # what else runs on this session and closes with it (a storage node...)
        self._after: list[Closable] = []
        self.buffers = BufferManager(
            session.engine, session.config.buffer_size, session.config.gpu_pipeline_chunk
        )
        self.disk_reads = DiskReader()
        self.peers = PeerOpener(session.peer)  # (a read with a deadline waits for a handshake only so long)
        self.leases = LeaseCache(float(session.terms.lease_ttl))
        session.on_heartbeat(lambda: {"touched": self.leases.take_touches() or None})

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
        session = Session(config)
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
        result = self._put([key], [[value]], replicas, pin)[0]
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
        return [r.code for r in self._put(keys, buffer_lists, replicas, pin)]

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
        return self._put(keys, buffer_lists, replicas, pin, min_replicas)

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
        return [r.code for r in self._put(keys, values, replicas, pin)]

    @collector_paused
    def _put(
        self,
        keys: Sequence[str],
        buffers: Sequence[Sequence[Any]] | Sequence[ValueBuffers],
        replicas: int | None,
        pin: bool,
        min_replicas: int | None = None,
    ) -> list[PutResult]:
        """`buffers`: each key's buffer list, or its ValueBuffers already resolved (piece_values)."""
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffer lists differ in length")
        least = self.config.min_replicas if min_replicas is None else min_replicas
        if isinstance(least, bool) or not isinstance(least, int) or not 0 <= least <= 64:
            raise InvalidArgumentError(f"min_replicas must be 0..64, got {least!r}")
        keys = list(keys)
        count = self._replicas(replicas)
        values = self.buffers.resolved(buffers, writable=False)
        try:
            return self.buffers.pipeline.put(
                values,
                lambda start, end: self._put_many(keys[start:end], values[start:end], count, pin, least),
            )
        finally:
            if not isinstance(values, PieceValues):  # (raw pieces are the caller's: nothing to give back)
                for value in values:
                    value.release(self.buffers)

    def _replicas(self, replicas: int | None) -> int:
        """None: the default (StoreConfig.replicas); anything else must be 1..64 (0 is an error)."""
        if replicas is None:
            return self.config.replicas
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 64:
            raise InvalidArgumentError(f"replicas must be 1..64 (or None for the default), got {replicas!r}")
        return replicas

    def _put_many(
        self, keys: list[str], values: Sequence[ValueBuffers], replicas: int, pin: bool, least: int
    ) -> list[PutResult]:
        """Per key its PutResult. The keys go to the master in chunks (requests it bounds at
        MAX_PUT_ITEMS), pipelined when there are many: the master places the next chunk while this
        thread writes one, and commits it while this thread goes on (a batch of small values spends as
        long in the master as here). A batch that names a key twice is not pipelined: in one request
        the second put finds the first in progress, as it always did; across chunks it would depend on
        timing."""
        size = v.MAX_PUT_ITEMS
        if len(keys) >= 2 * PIPELINED_CHUNK and len(set(keys)) == len(keys):
            size = min(size, max(PIPELINED_CHUNK, -(-len(keys) // PIPELINE_CHUNKS)))
        chunks = [
            PutChunk(keys[a : a + size], values[a : a + size], replicas, pin, least)
            for a in range(0, len(keys), size)
        ]
        if len(chunks) > 1 and size < v.MAX_PUT_ITEMS:
            self._put_pipelined(chunks)
        else:
            for chunk in chunks:
                self._put_pipelined([chunk])
        out: list[PutResult] = []
        for chunk in chunks:
            out += chunk.results()
            self.stats_local.puts += chunk.codes.count(OK)
        degraded = sum(chunk.degraded() for chunk in chunks)
        if degraded:
            self.stats_local.degraded_puts += degraded
            log.warning(
                "%d key(s) stored with fewer than %d replicas (too few usable segments)", degraded, replicas
            )
        return out

    def _put_pipelined(self, chunks: list[PutChunk]) -> None:
        """Runs the chunks: chunk k + 1's put start is out while chunk k is written, and each put end is
        received once every chunk is written."""
        master, client_id = self.master, self.client_id
        out: list[Sent] = []  # requests sent and not yet received (abandoned on an error)

        def send(request: Request | None) -> Sent | None:
            if request is None:
                return None
            out.append(master.send(request))
            return out[-1]

        def receive(sent: Sent | None) -> Any:
            if sent is None:
                return []
            out.remove(sent)
            return master.receive(sent)

        ends: list[tuple[PutChunk, Sent | None, Sent | None]] = []
        try:
            start = chunks[0].start(client_id)
            sent = send(start)
            for k, chunk in enumerate(chunks):
                upcoming = chunks[k + 1].start(client_id) if k + 1 < len(chunks) else None
                try:
                    started = receive(sent)
                except NotFoundError:  # the master forgot this client (it restarted): join again, once
                    self.session.rejoin()
                    started = master.call(start) if start is not None else []
                start, sent = upcoming, send(upcoming)
                self._report(chunk.write(started, self.engine, self.session.peer), [])
                revoke, end = chunk.end(client_id)
                ends.append((chunk, send(revoke), send(end)))
            for chunk, revoked, ended in ends:
                receive(revoked)
                chunk.ended(receive(ended))
        except BaseException:
            master.abandon(out)
            raise

    # -- gets -----------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        """The value, or None on a miss."""
        return self.batch_get([key])[0]

    @collector_paused
    def batch_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values (None for misses), read through the pre-faulted staging area, one metadata RPC."""
        self.stats_local.gets += len(keys)
        found, cached = self._locate(list(keys))
        present = [i for i, entry in enumerate(found) if entry is not None]
        spans: list[ValueBuffers] = [SpanList([self.buffers.scratch(found[i][0])]) for i in present]
        out: list[bytes | None] = [None] * len(keys)
        regrown: list[int] = []  # a cached size was out of date: the value changed since
        try:
            results = self._read_located(
                [keys[i] for i in present], spans, [found[i] for i in present], [cached[i] for i in present]
            )
            for i, scratch, r in zip(present, spans, results, strict=True):
                assert isinstance(scratch, SpanList)
                out[i] = bytes(scratch.spans[0].view[:r]) if r >= 0 else None
                if r == -InvalidArgumentError.code and cached[i]:
                    regrown.append(i)
        finally:
            for scratch in spans:
                scratch.release(self.buffers)
        if regrown:
            self.stats_local.gets -= len(regrown)
            for i, value in zip(regrown, self.batch_get([keys[i] for i in regrown]), strict=True):
                out[i] = value
        return out

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
        found, cached = self._locate(list(keys))
        return self._get_into(list(keys), buffer_lists, found, cached, until)

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
        found, cached = self._locate(list(keys))
        return self._get_into(list(keys), values, found, cached, until)

    def _get_into(
        self,
        keys: list[str],
        buffers: Sequence[Sequence[Any]] | Sequence[ValueBuffers],
        found: list[Any],
        cached: list[bool],
        deadline: Deadline | None = None,
    ) -> list[int]:
        self.stats_local.gets += len(keys)
        values = self.buffers.resolved(buffers, writable=True)
        results: list[int] = []

        def read(start: int, end: int) -> list[int]:
            out = self._read_located(
                keys[start:end], values[start:end], found[start:end], cached[start:end], deadline
            )
            for i, result in enumerate(out):
                if result == MISS and not v.key_ok(keys[start + i]):  # never asked of the master: fails alone
                    out[i] = -InvalidArgumentError.code
            return out

        try:
            results = self.buffers.pipeline.get(values, read)
            return results
        finally:
            if not isinstance(values, PieceValues):  # (raw pieces are the caller's: nothing to give back)
                for i, value in enumerate(values):
                    value.release(self.buffers, results[i] if i < len(results) and results[i] > 0 else 0)

    def _locate(
        self, keys: list[str], prefix: bool = False, direct: bool = True
    ) -> tuple[list[Any], list[bool]]:
        """Replica lists per key (None: absent): from still-valid leases, else one master RPC.
        With `prefix`, the master does not look up (nor lease) keys after the first absent one. With
        `direct`, disk-only objects on this host's disk tiers come back as disk locations to read here."""
        host_id = self.host_id if direct and self.config.disk_direct_reads else ""
        found = self.leases.lookup(keys)
        cached = [f is not None for f in found]
        missing = [i for i, hit in enumerate(cached) if not hit and v.key_ok(keys[i])]
        for start in range(0, len(missing), v.MAX_KEYS):  # in requests the master bounds
            chunk = missing[start : start + v.MAX_KEYS]
            asked = [keys[i] for i in chunk]
            granted_at = time.monotonic()
            reply = self.master.call(m.GetReplicas(keys=asked, prefix=prefix, host_id=host_id))
            self.leases.fill(asked, reply, granted_at)
            for i, entry in zip(chunk, reply, strict=True):
                found[i] = entry
            if prefix and None in reply:
                break  # the prefix ended in this chunk: nothing after it is worth a lookup
        return found, cached

    def _read_located(
        self,
        keys: list[str],
        values: Sequence[ValueBuffers],
        found: list[Any],
        cached: list[bool],
        deadline: Deadline | None = None,
    ) -> list[int]:
        """_read, then once more with fresh locations for keys whose lease-cached location failed, and
        for keys whose direct disk read failed (through the disk's node this time), while the deadline
        (if any) has not passed."""
        disk_failed: list[int] = []
        results = self._read_planned(keys, values, found, deadline)
        if results is None:
            results = self._read(keys, values, found, disk_failed, deadline)
        stale = [i for i, r in enumerate(results) if r < 0 and cached[i] and i not in disk_failed]
        # stale: the lease was not enough (a forced removal): ask the master afresh
        for again, direct in ((stale, True), (disk_failed, False)):
            if not again or (deadline is not None and deadline.passed()):
                continue
            retry = [keys[i] for i in again]
            self.leases.drop(retry)
            fresh, _ = self._locate(retry, direct=direct)
            reread = self._read(retry, [values[i] for i in again], fresh, None, deadline)
            for i, r in zip(again, reread, strict=True):
                results[i] = r
        stale_set = set(stale) | set(disk_failed)  # those were counted by the master's fresh lookup
        self.leases.served(
            [k for i, k in enumerate(keys) if cached[i] and results[i] >= 0 and i not in stale_set]
        )
        return results

    def _read_planned(
        self,
        keys: list[str],
        values: Sequence[ValueBuffers],
        found: list[Any],
        deadline: Deadline | None = None,
    ) -> list[int] | None:
        """_read of a batch that is the usual case (kvstore.client.read_plan) in one engine call; None
        for any other batch. What does not verify goes again through _read, which retries, reports and
        clears."""
        planned = read_plan.plan(
            found,
            values,
            self.session.peer if deadline is None else self.peers.opened,
            self._engines_to_avoid(),
        )
        if planned is None:
            return None
        verdicts = read_plan.run(planned, self.engine, transfer_timeout(deadline))
        again = [i for i, verdict in enumerate(verdicts) if verdict] if any(verdicts) else []  # (0: verified)
        self.stats_local.hits += len(keys) - len(again)
        results = planned.sizes
        if again:
            retried = [keys[i] for i in again], [values[i] for i in again], [found[i] for i in again]
            for i, result in zip(again, self._read(*retried, None, deadline), strict=True):
                results[i] = result
        return results

    def _read(
        self,
        keys: list[str],
        values: Sequence[ValueBuffers],
        found: list[Any],
        disk_failed: list[int] | None = None,
        deadline: Deadline | None = None,
    ) -> list[int]:
        """Reads each located key into its buffers, verified, from any of its replicas (same-host ones
        first, unreachable engines last; a failed read retried on the next) or disk records; `disk_failed`
        collects the keys whose read from a disk file on this host failed (the caller has their nodes
        load them instead). A key not read by `deadline` is LATE: not retried, not reported (a slow node
        is not a dead one), not cleared (see batch_get_into_multi_buffers)."""
        results = [MISS] * len(keys)
        todo: list[int] = []
        on_disk: dict[int, m.Location] = {}  # key -> the disk file on this host it reads itself
        choices: dict[int, list[Any]] = {}
        avoid = self._engines_to_avoid()
        for i, entry in enumerate(found):
            if entry is None:
                continue
            size, _checksum, locations = entry
            if values[i].size < size:
                results[i] = -InvalidArgumentError.code  # buffer too small
                continue
            if len(locations) == 1 and locations[0].engine:  # (one replica, served: most keys)
                choices[i] = locations
                todo.append(i)
                continue
            served = [x for x in locations if x.engine]
            if not served:
                if locations and locations[0].path:
                    on_disk[i] = locations[0]
                continue
            # Engines this process could not reach lately last; same-host copies first (shared memory), then
            # the others; ties in random order, so reads of a hot key spread over its replicas.
            if len(served) > 1:
                served.sort(key=lambda x: (x.engine in avoid, x.host_id != self.host_id, random.random()))
            choices[i] = served
            todo.append(i)
        unreachable: set[str] = set()
        corrupt: list[m.CorruptReplica] = []
        attempted: set[int] = set()  # keys a failed transfer or checksum may have left bytes for
        if on_disk:
            for i in self._read_disk(values, found, on_disk):
                results[i] = MISS
                attempted.add(i)
                if disk_failed is not None:
                    disk_failed.append(i)
            for i in on_disk:
                if i not in attempted:
                    results[i] = found[i][0]
        attempt = 0
        expected = {i: found[i][1] for i in todo}
        peers: dict[str, Peer | NotInTime | None] = {}  # (one lookup per engine, not per key)
        while todo:
            if deadline is not None and deadline.passed():
                for i in todo:
                    results[i] = LATE
                break
            needed = {choices[i][attempt][2] for i in todo} - peers.keys()
            peers.update(self.peers.open_all(needed, deadline))  # (their handshakes at once)
            requests = TransferBatch()
            for i in todo:
                _tier, _host, engine, region_id, offset, slot, gen, _path = choices[i][attempt]
                peer = peers[engine]
                if peer is None:
                    requests.fail(i, engine)
                    continue
                if not isinstance(peer, Peer):  # its handshake outlasts the deadline (it goes on)
                    results[i] = LATE
                    continue
                addrs, lengths = values[i].pieces(found[i][0])
                requests.add_pieces(i, Op.READ, addrs, lengths, peer, region_id, offset, slot, gen)
            retry = []
            # Keys are verified as their bytes land (still in cache), between copies this thread helps with.
            ended = list(requests.stream(self.engine, expected, transfer_timeout(deadline)))
            # Keys the engine could not verify (GPU memory, several requests) are hashed in one call.
            unchecked = [i for i, code, verified in ended if code == OK and verified is None]
            if unchecked:
                digests = checksums([values[i] for i in unchecked], [found[i][0] for i in unchecked])
                hashed = {i: d == expected[i] for i, d in zip(unchecked, digests, strict=True)}
            for i, code, verified in ended:
                if code == OK and (verified if verified is not None else hashed[i]):
                    results[i] = found[i][0]
                    self.stats_local.hits += 1
                    continue
                if code == TIMED_OUT and deadline is not None:  # (the engine's timeout is the deadline)
                    results[i] = LATE
                    continue
                _tier, _host, engine, region_id, offset, _slot, _gen, _path = choices[i][attempt]
                attempted.add(i)
                if code == STALE:  # the node fenced that allocation off: the location is out of date
                    self.stats_local.stale_locations += 1
                elif code != OK:
                    self.stats_local.replica_failures += 1
                    unreachable.add(engine)
                else:
                    self.stats_local.checksum_mismatches += 1
                    corrupt.append(m.CorruptReplica(keys[i], engine, region_id, offset, found[i][1]))
                if attempt + 1 < len(choices[i]):
                    retry.append(i)
            todo = retry
            attempt += 1
        for i in attempted:  # a miss leaves no bytes of a failed attempt in the caller's buffers
            if results[i] < 0:
                values[i].clear()
        self._report(unreachable, corrupt)
        return results

    def _read_disk(
        self, values: Sequence[ValueBuffers], found: list[Any], on_disk: dict[int, m.Location]
    ) -> list[int]:
        """Reads disk-only objects from their disk files on this host; returns the keys that failed
        (unreadable, or bytes that do not verify: a record freed or reused since it was located)."""
        items = []
        for i, where in on_disk.items():
            addrs, lengths = values[i].pieces(found[i][0])
            items.append((ints(addrs), ints(lengths), found[i][0], where))
        failed = []
        for i, ok in zip(on_disk, self.disk_reads.read(items), strict=True):
            if ok and self._checksum_ok(values[i], found[i][0], found[i][1]):
                self.stats_local.disk_reads += 1
                self.stats_local.hits += 1
            else:
                self.stats_local.disk_read_failures += 1
                failed.append(i)
        return failed

    def _engines_to_avoid(self) -> set[str]:
        if not self._unreachable:
            return set()
        now = time.monotonic()
        avoid = set()
        for engine, until in list(self._unreachable.items()):  # (a copy: other threads report meanwhile)
            if until > now:
                avoid.add(engine)
            else:
                self._unreachable.pop(engine, None)
        return avoid

    def _report(self, unreachable: set[str], corrupt: list[m.CorruptReplica]) -> None:
        """Tells the master what this read or write found (best effort: the call's results stand)."""
        if not unreachable and not corrupt:
            return
        until = time.monotonic() + AVOID_UNREACHABLE_SECONDS
        self._unreachable.update(dict.fromkeys(unreachable, until))
        engines = sorted(unreachable)
        report = m.ReportReplicas(self.client_id, engines, corrupt)
        try:
            self.master.call(report)
        except KVStoreError as exc:
            log.debug("could not report unreachable/corrupt replicas: %s", exc)

    def _checksum_ok(self, value: ValueBuffers, size: int, expected: int) -> bool:
        """Whether the value's first `size` bytes are the object's (hashed here)."""
        return checksums([value], [size])[0] == expected

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
        found, cached = self._locate(list(keys), prefix=True)
        n = next((i for i, entry in enumerate(found) if entry is None), len(found))
        if n == 0:
            return 0
        results = self._get_into(list(keys[:n]), [[b] for b in buffers[:n]], found[:n], cached[:n], until)
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
