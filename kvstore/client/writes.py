"""The store's write side: a batch put's values resolved into registered memory for the call (a chunk of
GPU values copied to host staging while the one before is on the wire), cut into PutChunks that run in a
pipeline with the master, and each value's call-long buffers given back."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from kvstore.client.buffers import BufferManager, ValueBuffers
from kvstore.client.collector import collector_paused
from kvstore.client.put_chunk import PutChunk, PutResult
from kvstore.client.replica_reports import ReplicaReports
from kvstore.client.stats import ClientStats
from kvstore.client.transfer_batch import OK
from kvstore.cluster.master_client import Sent
from kvstore.cluster.session import Session
from kvstore.errors import InvalidArgumentError, NotFoundError
from kvstore.rpc import validate as v
from kvstore.rpc.messages import Request

log = logging.getLogger("kvstore.client")

PIPELINED_CHUNK = 256  # keys of a batch put's chunk (at least) when the batch is pipelined
PIPELINE_CHUNKS = 4  # chunks a pipelined batch put is cut into (of PIPELINED_CHUNK keys at least)


class Writes:
    def __init__(
        self, session: Session, buffers: BufferManager, reports: ReplicaReports, stats: ClientStats
    ) -> None:
        self.session, self.buffers, self.reports, self.stats = session, buffers, reports, stats

    @collector_paused
    def put(
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
        least = self.session.config.min_replicas if min_replicas is None else min_replicas
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
            self.buffers.release_values(values)

    def _replicas(self, replicas: int | None) -> int:
        """None: the default (StoreConfig.replicas); anything else must be 1..64 (0 is an error)."""
        if replicas is None:
            return self.session.config.replicas
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
            self.stats.puts += chunk.codes.count(OK)
        degraded = sum(chunk.degraded() for chunk in chunks)
        if degraded:
            self.stats.degraded_puts += degraded
            log.warning(
                "%d key(s) stored with fewer than %d replicas (too few usable segments)", degraded, replicas
            )
        return out

    def _put_pipelined(self, chunks: list[PutChunk]) -> None:
        """Runs the chunks: chunk k + 1's put start is out while chunk k is written, and each put end is
        received once every chunk is written."""
        master, client_id = self.session.master, self.session.client_id
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
                self.reports.report(chunk.write(started, self.session.engine, self.session.peer), [])
                revoke, end = chunk.end(client_id)
                ends.append((chunk, send(revoke), send(end)))
            for chunk, revoked, ended in ends:
                receive(revoked)
                chunk.ended(receive(ended))
        except BaseException:
            master.abandon(out)
            raise
