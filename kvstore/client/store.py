"""`Store`: the client of the KV-cache store.

Metadata goes to the master in one RPC per batch; bytes move directly between this process and the
segments holding the replicas, through the transfer engine (same host: shared memory; else TCP).
Every value is checked against its xxh3-64 checksum on read: a mismatch is a miss, never bytes.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from kvstore.client.buffers import BufferManager, Span
from kvstore.client.lease_cache import LeaseCache
from kvstore.client.master_client import MasterClient
from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    ObjectNotFoundError,
    TransferConnectionError,
    error_for_code,
)
from transfer_engine import BatchHandle, Op, RequestState, Segment, TransferEngine
from transfer_engine.units import parse_size

log = logging.getLogger("kvstore.client")

OK = 0
MISS = -ObjectNotFoundError.code
"""Per-key result of a batch get for a key that is absent (or whose every replica failed its check)."""


def result_error(result: int) -> KVStoreError | None:
    """The exception a negative per-key batch result stands for; None for a success (>= 0)."""
    return None if result >= 0 else error_for_code(-result, f"store error {-result}")


@dataclass
class ClientStats:
    checksum_mismatches: int = 0
    replica_failures: int = 0
    gets: int = 0
    hits: int = 0
    puts: int = 0


@dataclass
class PrefixMatch:
    matched: int
    """Leading keys stored."""
    replicas: list[list[str]]
    """For each matched key, the segments (transfer engine names) holding a replica."""
    per_node: dict[str, int]
    """For each segment, how many leading keys it holds itself."""


class Store:
    """Thread-safe client. Create with :meth:`connect` (a running master) or :meth:`embedded`."""

    def __init__(
        self,
        master: MasterClient,
        engine: TransferEngine,
        *,
        segment_size: int,
        buffer_size: int,
        default_replicas: int,
        owned_master: Any = None,
    ) -> None:
        self.master = master
        self.engine = engine
        self.client_id = uuid.uuid4().hex
        self.host_id = engine.host_id
        self.default_replicas = default_replicas
        self.stats_local = ClientStats()
        self._owned_master = owned_master
        self._segments: dict[str, Segment] = {}
        self._segments_lock = threading.Lock()
        self._closed = threading.Event()
        self.buffers = BufferManager(engine, buffer_size)
        self.segment = engine.allocate(segment_size) if segment_size else None
        info = self.master.call("register_client", client_id=self.client_id, host_id=self.host_id)
        self.leases = LeaseCache(float(info["lease_ttl"]))
        self._mount()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_loop,
            args=(float(info["heartbeat_interval"]),),
            name="kvstore-heartbeat",
            daemon=True,
        )
        self._heartbeat.start()

    # -- construction ---------------------------------------------------------------------------------
    @classmethod
    def connect(
        cls,
        master: str,
        *,
        segment_size: int | str = 0,
        buffer_size: int | str = "64MiB",
        protocol: str = "auto",
        host: str = "127.0.0.1",
        replicas: int = 1,
        timeout: float = 10.0,
    ) -> Store:
        """Joins the cluster of the master at HOST:PORT; contributes `segment_size` bytes if > 0."""
        client = MasterClient(master, timeout=timeout)
        client.call("ping")
        engine = TransferEngine(host=host, protocol=protocol)
        try:
            return cls(
                client,
                engine,
                segment_size=parse_size(segment_size),
                buffer_size=parse_size(buffer_size),
                default_replicas=replicas,
            )
        except BaseException:
            engine.close()
            client.close()
            raise

    @classmethod
    def embedded(cls, segment_size: int | str = "1GiB", **kwargs: Any) -> Store:
        """A master and a segment in this process: the default for examples and the main command."""
        from kvstore.master import Master, MasterConfig

        # The master shares this process's GIL with the client: polling for requests would slow both.
        master_kwargs = {"busy_poll_us": 0, **kwargs.pop("master_config", {})}
        embedded = Master.start_in_thread(MasterConfig.load(**master_kwargs))
        try:
            store = cls.connect(embedded.address, segment_size=segment_size, **kwargs)
        except BaseException:
            embedded.stop()
            raise
        store._owned_master = embedded
        return store

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(KVStoreError):  # else the master drops us after the heartbeat TTL
            self.master.call("close_client", client_id=self.client_id, timeout=2.0)
        self.master.close()
        self.buffers.close()
        self.engine.close()
        if self._owned_master is not None:
            self._owned_master.stop()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def master_address(self) -> str:
        return self.master.address

    # -- membership -----------------------------------------------------------------------------------
    def _mount(self) -> None:
        if self.segment is not None:
            self.master.call(
                "mount_segment",
                client_id=self.client_id,
                engine=self.engine.name,
                region_id=self.segment.id,
                size=self.segment.length,
                host_id=self.host_id,
            )

    def _heartbeat_loop(self, interval: float) -> None:
        while not self._closed.wait(interval):
            try:
                reply = self.master.call(
                    "heartbeat",
                    client_id=self.client_id,
                    touched=self.leases.take_touches(),
                    timeout=interval * 2,
                )
                for task in reply.get("tasks", []):
                    self._copy_replica(task)
                # Dropped (e.g. the master restarted): join again with an empty segment.
                if not reply["known"]:
                    log.warning("master forgot this client; registering again")
                    self.master.call("register_client", client_id=self.client_id, host_id=self.host_id)
                    self._mount()
            except KVStoreError as exc:
                log.debug("heartbeat failed: %s", exc)

    def _copy_replica(self, task: dict[str, Any]) -> None:
        """A replica the master placed on our segment: read it from its source, verify, report."""
        ok = False
        try:
            engine_name, region_id, offset = task["source"]
            size, dest = int(task["size"]), int(task["offset"])
            segment = self._segment(engine_name)
            if self.segment is not None and self.segment.array is not None and segment is not None:
                state, _ = self.engine.transfer_one(
                    Op.READ, self.segment.addr + dest, segment, region_id, offset, size
                )
                view = self.segment.array[dest : dest + size]
                ok = (
                    state == RequestState.COMPLETED
                    and xxhash.xxh3_64_intdigest(view.data) == task["checksum"]
                )
        except (KVStoreError, KeyError, TypeError, ValueError) as exc:
            log.debug("replica copy failed: %s", exc)
        self.master.call("replica_done", client_id=self.client_id, task=int(task["task"]), ok=ok)

    def change_replica(self, key: str, replicas: int) -> None:
        """Asks for exactly `replicas` copies of key (0: back to automatic, by how hot it is)."""
        self.master.call("change_replica", key=key, replicas=replicas)

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
        result, message = self._put([key], [[value]], replicas, pin)[0]
        if result < 0:
            raise error_for_code(-result, message or f"put of {key!r} failed")

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
        return [result for result, _ in self._put(keys, buffer_lists, replicas, pin)]

    def _put(
        self, keys: Sequence[str], buffer_lists: Sequence[Sequence[Any]], replicas: int | None, pin: bool
    ) -> list[tuple[int, str]]:
        if len(keys) != len(buffer_lists):
            raise InvalidArgumentError("keys and buffer lists differ in length")
        spans = [[self.buffers.span(b, writable=False) for b in parts] for parts in buffer_lists]
        try:
            return self._put_many(list(keys), spans, replicas or self.default_replicas, pin)
        finally:
            for parts in spans:
                for s in parts:
                    self.buffers.release(s)

    def _put_many(
        self, keys: list[str], spans: list[list[Span]], replicas: int, pin: bool
    ) -> list[tuple[int, str]]:
        """Per key: (0 or a negative code, the reason)."""
        results = [OK] * len(keys)
        messages = [""] * len(keys)
        items = []
        for key, parts in zip(keys, spans, strict=True):
            digest = xxhash.xxh3_64()
            for s in parts:
                digest.update(s.view.data)
            items.append([key, sum(s.length for s in parts), digest.intdigest()])
        started = self.master.call(
            "put_start", client_id=self.client_id, items=items, replicas=replicas, pin=pin
        )
        requests = _Requests()
        writing: list[int] = []
        for i, (code, message, placed) in enumerate(started):
            if code:
                results[i], messages[i] = -code, message
            elif placed is not None:
                writing.append(i)
                for engine, region_id, offset in placed:
                    segment = self._segment(engine)
                    if segment is None:
                        requests.fail(i)
                        continue
                    at = offset
                    for s in spans[i]:
                        requests.add(i, Op.WRITE, s.addr, segment, region_id, at, s.length)
                        at += s.length
        failed = requests.run(self.engine)
        done = [i for i in writing if i not in failed]
        undone = [i for i in writing if i in failed]
        if undone:
            self.master.call("put_revoke", client_id=self.client_id, keys=[keys[i] for i in undone])
            for i in undone:
                results[i] = -TransferConnectionError.code
                messages[i] = "the bytes did not reach every replica"
        if done:
            ended = self.master.call("put_end", client_id=self.client_id, keys=[keys[i] for i in done])
            for i, (code, message, _none) in zip(done, ended, strict=True):
                if code:
                    results[i], messages[i] = -code, message
        self.stats_local.puts += sum(1 for r in results if r == OK)
        return list(zip(results, messages, strict=True))

    # -- gets -----------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        """The value, or None on a miss."""
        return self.batch_get([key])[0]

    def batch_get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values (None for misses), read through the pre-faulted staging area, one metadata RPC."""
        self.stats_local.gets += len(keys)
        found, cached = self._locate(list(keys))
        present = [i for i, entry in enumerate(found) if entry is not None]
        spans = [[self.buffers.scratch(found[i][0])] for i in present]
        out: list[bytes | None] = [None] * len(keys)
        try:
            results = self._read_located(
                [keys[i] for i in present], spans, [found[i] for i in present], [cached[i] for i in present]
            )
            for i, (span,), r in zip(present, spans, results, strict=True):
                out[i] = bytes(span.view[:r]) if r >= 0 else None
        finally:
            for (span,) in spans:
                self.buffers.release(span)
        return out

    def get_into(self, key: str, buffer: Any) -> int:
        """Bytes read into buffer, or a negative code (MISS when absent)."""
        return self.batch_get_into([key], [buffer])[0]

    def batch_get_into(self, keys: Sequence[str], buffers: Sequence[Any]) -> list[int]:
        """Per key: bytes read, or a negative code (MISS for absent or unreadable keys)."""
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffers differ in length")
        return self.batch_get_into_multi_buffers(keys, [[b] for b in buffers])

    def batch_get_into_multi_buffers(
        self, keys: Sequence[str], buffer_lists: Sequence[Sequence[Any]]
    ) -> list[int]:
        """Each key's value is spread over its buffers in order."""
        if len(keys) != len(buffer_lists):
            raise InvalidArgumentError("keys and buffer lists differ in length")
        found, cached = self._locate(list(keys))
        return self._get_into(list(keys), buffer_lists, found, cached)

    def _get_into(
        self, keys: list[str], buffer_lists: Sequence[Sequence[Any]], found: list[Any], cached: list[bool]
    ) -> list[int]:
        self.stats_local.gets += len(keys)
        spans = [[self.buffers.span(b, writable=True) for b in parts] for parts in buffer_lists]
        results: list[int] = []
        try:
            results = self._read_located(keys, spans, found, cached)
            return results
        finally:
            for i, parts in enumerate(spans):
                left = results[i] if i < len(results) and results[i] > 0 else 0
                for s in parts:
                    self.buffers.release(s, copy_out=left > 0, length=min(left, s.length))
                    left -= min(left, s.length)

    def _locate(self, keys: list[str], prefix: bool = False) -> tuple[list[Any], list[bool]]:
        """Replica lists per key (None: absent): from still-valid leases, else one master RPC.
        With `prefix`, the master does not look up (nor lease) keys after the first absent one."""
        found = self.leases.lookup(keys)
        cached = [f is not None for f in found]
        missing = [i for i, hit in enumerate(cached) if not hit]
        if missing:
            asked = [keys[i] for i in missing]
            granted_at = time.monotonic()
            reply = self.master.call("get_replicas", keys=asked, prefix=prefix)
            self.leases.fill(asked, reply, granted_at)
            for i, entry in zip(missing, reply, strict=True):
                found[i] = entry
        return found, cached

    def _read_located(
        self, keys: list[str], spans: list[list[Span]], found: list[Any], cached: list[bool]
    ) -> list[int]:
        """_read, then once more with fresh locations for keys whose lease-cached location failed."""
        results = self._read(keys, spans, found)
        stale = [i for i, r in enumerate(results) if r < 0 and cached[i]]
        if stale:  # the lease was not enough (a forced removal): ask the master afresh
            retry = [keys[i] for i in stale]
            self.leases.drop(retry)
            fresh, _ = self._locate(retry)
            for i, r in zip(stale, self._read(retry, [spans[i] for i in stale], fresh), strict=True):
                results[i] = r
        stale_set = set(stale)  # those were counted by the master's fresh lookup
        self.leases.served(
            [k for i, k in enumerate(keys) if cached[i] and results[i] >= 0 and i not in stale_set]
        )
        return results

    def _read(self, keys: list[str], spans: list[list[Span]], found: list[Any]) -> list[int]:
        results = [MISS] * len(keys)
        todo: list[int] = []
        choices: dict[int, list[Any]] = {}
        for i, entry in enumerate(found):
            if entry is None:
                continue
            size, _checksum, replicas = entry
            if sum(s.length for s in spans[i]) < size:
                results[i] = -InvalidArgumentError.code  # buffer too small
                continue
            # Same-host replicas first (shared memory), then the others; ties in random order, so
            # reads of a hot key spread over its replicas.
            choices[i] = sorted(replicas, key=lambda r: (r[3] != self.host_id, random.random()))
            todo.append(i)
        attempt = 0
        while todo:
            requests = _Requests()
            for i in todo:
                engine, region_id, offset, _host = choices[i][attempt]
                segment = self._segment(engine)
                if segment is None:
                    requests.fail(i)
                    continue
                left = found[i][0]
                for s in spans[i]:
                    n = min(left, s.length)
                    if n:
                        requests.add(i, Op.READ, s.addr, segment, region_id, offset, n)
                    offset += n
                    left -= n
            retry = []
            # Keys are verified as their bytes land (still in cache), between copies this thread helps with.
            for i, moved in requests.stream(self.engine):
                if moved and self._checksum_ok(spans[i], found[i][0], found[i][1]):
                    results[i] = found[i][0]
                    self.stats_local.hits += 1
                    continue
                if not moved:
                    self.stats_local.replica_failures += 1
                else:
                    self.stats_local.checksum_mismatches += 1
                if attempt + 1 < len(choices[i]):
                    retry.append(i)
            todo = retry
            attempt += 1
        return results

    def _checksum_ok(self, spans: list[Span], size: int, expected: int) -> bool:
        digest = xxhash.xxh3_64()
        left = size
        for s in spans:
            data = s.staged if s.staged is not None else s.view
            n = min(left, s.length)
            digest.update(data[:n].data)
            left -= n
        return digest.intdigest() == expected

    def _segment(self, name: str) -> Segment | None:
        with self._segments_lock:
            segment = self._segments.get(name)
        if segment is not None:
            return segment
        try:
            segment = self.engine.open_segment(name)
        except KVStoreError as exc:
            log.debug("cannot open segment %s: %s", name, exc)
            return None
        with self._segments_lock:
            self._segments[name] = segment
        return segment

    # -- prefix blocks -------------------------------------------------------------------------------
    def put_blocks(self, keys: Sequence[str], buffers: Sequence[Any], **kwargs: Any) -> list[int]:
        """Stores KV blocks (keys from kvstore.blocks.BlockHasher); per key 0 or a negative code."""
        return self.batch_put_from(keys, buffers, **kwargs)

    def get_blocks(self, keys: Sequence[str], buffers: Sequence[Any]) -> int:
        """Loads the leading run of stored blocks into buffers; returns how many leading blocks loaded.

        A block is worthless without its prefix, so blocks after the first miss are not fetched.
        """
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffers differ in length")
        found, cached = self._locate(list(keys), prefix=True)
        n = next((i for i, entry in enumerate(found) if entry is None), len(found))
        if n == 0:
            return 0
        results = self._get_into(list(keys[:n]), [[b] for b in buffers[:n]], found[:n], cached[:n])
        loaded = 0
        while loaded < n and results[loaded] >= 0:
            loaded += 1
        return loaded

    def match_prefix(self, keys: Sequence[str]) -> PrefixMatch:
        """The number of leading keys stored (one RPC), where each lives, and per node its leading run:
        a scheduler routes the request to the node with the longest run."""
        reply = self.master.call("match_prefix", keys=list(keys))
        return PrefixMatch(
            int(reply["matched"]), [list(r) for r in reply["replicas"]], dict(reply["per_node"])
        )

    # -- the rest -------------------------------------------------------------------------------------
    def exists(self, key: str) -> bool:
        return bool(self.master.call("exists", keys=[key])[0])

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        return [bool(x) for x in self.master.call("exists", keys=list(keys))]

    def remove(self, key: str, *, force: bool = False) -> None:
        """Removes key; ObjectNotFoundError if absent, ObjectBusyError if leased (unless force)."""
        self.leases.drop([key])
        code, message, _ = self.master.call("remove", keys=[key], force=force)[0]
        if code:
            raise error_for_code(code, message)

    def batch_remove(self, keys: Sequence[str], *, force: bool = False) -> list[int]:
        """One RPC; per key 0, or a negative code (MISS when absent, busy when leased)."""
        self.leases.drop(keys)
        return [-code for code, _message, _ in self.master.call("remove", keys=list(keys), force=force)]

    def remove_all(self, *, force: bool = False) -> int:
        self.leases.clear()
        return int(self.master.call("remove_all", force=force))

    def stats(self) -> dict[str, Any]:
        master = self.master.call("stats")
        return {"master": master, "client": dict(vars(self.stats_local))}


_PENDING = int(RequestState.PENDING)
_COMPLETED = int(RequestState.COMPLETED)


class _Requests:
    """Flat arrays for one engine batch, with the key index of every request."""

    def __init__(self) -> None:
        self.owner: list[int] = []
        self.ops: list[int] = []
        self.local: list[int] = []
        self.regions: list[int] = []
        self.offsets: list[int] = []
        self.lengths: list[int] = []
        self.failed: set[int] = set()
        self.segments: list[Segment] = []

    def add(
        self, owner: int, op: Op, local: int, segment: Segment, region: int, offset: int, length: int
    ) -> None:
        self.owner.append(owner)
        self.ops.append(op)
        self.local.append(local)
        self.segments.append(segment)
        self.regions.append(region)
        self.offsets.append(offset)
        self.lengths.append(length)

    def fail(self, owner: int) -> None:
        self.failed.add(owner)

    def _submit(self, engine: TransferEngine) -> BatchHandle:
        handles = [s.handle for s in self.segments]
        return engine.submit(self.ops, self.local, handles, self.regions, self.offsets, self.lengths)

    def stream(self, engine: TransferEngine) -> Iterator[tuple[int, bool]]:
        """Runs the batch, yielding (owner, all its requests completed) as each owner's requests end."""
        for owner in self.failed:
            yield owner, False
        if len(self.owner) <= 1:  # nothing to overlap: the single-call path
            already = set(self.failed)
            failed = self.run(engine)
            for owner in set(self.owner) - already:
                yield owner, owner not in failed
            return
        handle = self._submit(engine)
        # An owner's requests are contiguous: owner k covers [starts[k], starts[k + 1]).
        owner_ids = np.asarray(self.owner)
        starts = np.flatnonzero(np.r_[True, owner_ids[1:] != owner_ids[:-1]])
        owners = owner_ids[starts]
        open_ = ~np.isin(owners, list(self.failed))  # owners already reported as failed
        while open_.any():
            helped = handle.help_once()
            states = handle.states()
            unfinished = np.add.reduceat(states == _PENDING, starts)
            bad = np.add.reduceat(states != _COMPLETED, starts)
            finished = np.flatnonzero(open_ & (unfinished == 0))
            open_[finished] = False
            for k in finished.tolist():
                yield int(owners[k]), bool(bad[k] == 0)
            if finished.size == 0 and not helped:
                handle.wait(0.0002, help=False)

    def run(self, engine: TransferEngine) -> set[int]:
        """Runs the batch (this thread helps move bytes); returns the owners with a request not completed."""
        if len(self.owner) == 1:  # one request: the engine's single-call path, no arrays
            state, _ = engine.transfer_one(
                self.ops[0],
                self.local[0],
                self.segments[0],
                self.regions[0],
                self.offsets[0],
                self.lengths[0],
            )
            if state != RequestState.COMPLETED:
                self.failed.add(self.owner[0])
        elif self.owner:
            handle = self._submit(engine)
            handle.wait()
            bad = np.flatnonzero(handle.states() != RequestState.COMPLETED)
            self.failed.update(self.owner[j] for j in bad)
        return self.failed


__all__ = ["MISS", "OK", "PrefixMatch", "Store", "result_error"]
