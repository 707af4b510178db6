"""One batch read of located keys into their values (ReadBatch): the one read path of every get.

A batch that is the usual case (kvstore.client.read_plan: every key at one served location, raw values
of exactly its size, no engine to avoid) is read first in one engine call built from columns, no
Python step per key. The keys that round did not verify, and every key of any other batch, are read in
rounds: each from one of its replicas (same-host ones first, engines this process could not reach
lately last), a failed read tried again on the next replica, or from a disk record on this host; every
value is verified, a miss leaves no bytes of a failed attempt in the caller's buffers. Last, keys whose
lease-cached location failed and keys whose direct disk read failed are located afresh and read once
more (through the disk's node this time). Under a deadline a key not read verified by then is LATE:
not retried, not reported (a slow node is not a dead one), not cleared.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvstore.client import read_plan
from kvstore.client.buffers import ValueBuffers, checksums, ints
from kvstore.client.deadline import Deadline, transfer_timeout
from kvstore.client.disk_reads import DiskReader
from kvstore.client.fields import checksum_of, engine_of, size_of
from kvstore.client.locator import Locator
from kvstore.client.peer_opening import NotInTime, PeerOpener
from kvstore.client.replica_reports import ReplicaReports
from kvstore.client.stats import ClientStats
from kvstore.client.transfer_batch import OK, STALE, TransferBatch
from kvstore.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    ObjectNotFoundError,
    TransferTimeoutError,
)
from kvstore.rpc import messages as m
from transfer_engine import Op, Peer, TransferEngine

MISS = -ObjectNotFoundError.code
"""Per-key result of a batch get for a key that is absent (or whose every replica failed its check)."""
LATE = -DeadlineExceededError.code
"""Per-key result of a batch get given a deadline for a key whose bytes did not arrive verified by then."""
TIMED_OUT = TransferTimeoutError.code  # a transfer's error code when it was not done by its batch's timeout


@dataclass(frozen=True, slots=True)
class ReadTools:
    """What every read of one store uses (made once, by the store)."""

    engine: TransferEngine
    peers: PeerOpener  # the session's peers: opened on first use, or bounded by a read's deadline
    locator: Locator
    reports: ReplicaReports
    disk_reads: DiskReader
    stats: ClientStats

    @property
    def host_id(self) -> str:
        """This process's host: replicas there are read first (shared memory)."""
        return self.locator.session.host_id


class ReadBatch:
    """The read of one batch of located keys (see the module's doc); `found` is the batch's own list: keys
    located afresh get their new locations in it."""

    def __init__(
        self,
        tools: ReadTools,
        keys: list[str],
        values: Sequence[ValueBuffers],
        found: list[Any],
        cached: list[bool],
        deadline: Deadline | None = None,
    ) -> None:
        self.tools, self.keys, self.values, self.found, self.cached = tools, keys, values, found, cached
        self.deadline = deadline
        self.results: list[int] = []  # per key its size once read verified, else a negative code

    def run(self) -> list[int]:
        """Per key the bytes read (its object's size), or MISS, LATE, or InvalidArgumentError's code for
        buffers too small. Reads served from lease-cached locations are counted for the master."""
        keys, cached, deadline, locator = self.keys, self.cached, self.deadline, self.tools.locator
        disk_failed: list[int] = []
        avoid = self.tools.reports.avoid()  # (once for the column round and the rounds after it)
        unverified = self._column_round(avoid)
        if unverified is None:
            self.results = [MISS] * len(keys)
            self._rounds(range(len(keys)), avoid, disk_failed)
        else:
            self._rounds(unverified, avoid)
        results = self.results
        stale = [i for i, r in enumerate(results) if r < 0 and cached[i] and i not in disk_failed]
        # stale: the lease was not enough (a forced removal): ask the master afresh
        for again, direct in ((stale, True), (disk_failed, False)):
            if not again or (deadline is not None and deadline.passed()):
                continue
            retry = [keys[i] for i in again]
            locator.leases.drop(retry)
            fresh, _ = locator.locate(retry, direct=direct)
            for i, entry in zip(again, fresh, strict=True):
                self.found[i] = entry
                results[i] = MISS
            self._rounds(again, self.tools.reports.avoid())  # (this batch's rounds may have reported some)
        stale_set = set(stale) | set(disk_failed)  # those were counted by the master's fresh lookup
        locator.leases.served(
            [k for i, k in enumerate(keys) if cached[i] and results[i] >= 0 and i not in stale_set]
        )
        return results

    def _column_round(self, avoid: set[str]) -> list[int] | None:
        """Reads a batch that is the usual case (kvstore.client.read_plan) in one engine call and returns
        the keys that did not verify, their results MISS (the rounds read them again, report and clear);
        None for any other batch."""
        tools, deadline = self.tools, self.deadline
        peer_of = tools.peers.open if deadline is None else tools.peers.opened
        planned = read_plan.plan(self.found, self.values, peer_of, avoid)
        if planned is None:
            return None
        verdicts = read_plan.run(planned, tools.engine, transfer_timeout(deadline))
        again = [i for i, verdict in enumerate(verdicts) if verdict] if any(verdicts) else []  # (0: verified)
        tools.stats.hits += len(self.keys) - len(again)
        self.results = results = planned.sizes
        for i in again:
            results[i] = MISS
        return again

    def _rounds(self, keys: Sequence[int], avoid: set[str], disk_failed: list[int] | None = None) -> None:
        """Reads each of `keys` (indices in the batch, each result MISS until read) from any of its
        replicas or disk records, those on engines in `avoid` last; `disk_failed` collects the keys whose
        read from a disk file on this host failed (run() has their nodes load them instead)."""
        if not keys:
            return
        todo, choices, on_disk = self._choose(keys, avoid)
        attempted: set[int] = set()  # keys a failed transfer or checksum may have left bytes for
        if on_disk:
            self._from_disk(on_disk, attempted, disk_failed)
        unreachable, corrupt = self._from_replicas(todo, choices, attempted)
        results, values = self.results, self.values
        for i in attempted:  # a miss leaves no bytes of a failed attempt in the caller's buffers
            if results[i] < 0:
                values[i].clear()
        self.tools.reports.report(unreachable, corrupt)

    def _choose(
        self, keys: Sequence[int], avoid: set[str]
    ) -> tuple[list[int], dict[int, list[Any]], dict[int, m.Location]]:
        """The keys to read from replicas with their replicas in the order to try them, and the keys to
        read from a disk file on this host (a buffer too small: said here)."""
        results, values, found = self.results, self.values, self.found
        todo: list[int] = []
        on_disk: dict[int, m.Location] = {}  # key -> the disk file on this host it reads itself
        choices: dict[int, list[Any]] = {}
        host_id = self.tools.host_id
        for i in keys:
            entry = found[i]
            if entry is None:
                continue
            locations = entry.locations
            if values[i].size < entry.size:
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
                served.sort(key=lambda x: (x.engine in avoid, x.host_id != host_id, random.random()))
            choices[i] = served
            todo.append(i)
        return todo, choices, on_disk

    def _from_disk(
        self, on_disk: dict[int, m.Location], attempted: set[int], disk_failed: list[int] | None
    ) -> None:
        results, found = self.results, self.found
        for i in self._read_disk(on_disk):
            results[i] = MISS
            attempted.add(i)
            if disk_failed is not None:
                disk_failed.append(i)
        for i in on_disk:
            if i not in attempted:
                results[i] = found[i].size

    def _read_disk(self, on_disk: dict[int, m.Location]) -> list[int]:
        """Reads disk-only objects from their disk files on this host; returns the keys that failed
        (unreadable, or bytes that do not verify: a record freed or reused since it was located)."""
        values, found, stats = self.values, self.found, self.tools.stats
        items = []
        for i, where in on_disk.items():
            size = found[i].size
            addrs, lengths = values[i].pieces(size)
            items.append((ints(addrs), ints(lengths), size, where))
        read = [i for i, ok in zip(on_disk, self.tools.disk_reads.read(items), strict=True) if ok]
        verified: set[int] = set()
        if read:  # (the bytes of every key read, hashed in one call)
            digests = checksums([values[i] for i in read], [found[i].size for i in read])
            verified = {i for i, digest in zip(read, digests, strict=True) if digest == found[i].checksum}
        failed = []
        for i in on_disk:
            if i in verified:
                stats.disk_reads += 1
                stats.hits += 1
            else:
                stats.disk_read_failures += 1
                failed.append(i)
        return failed

    def _from_replicas(
        self, todo: list[int], choices: dict[int, list[Any]], attempted: set[int]
    ) -> tuple[set[str], list[m.CorruptReplica]]:
        """Reads the keys in rounds, round k each key still unread from its k-th replica, verified as its
        bytes land; returns the engines it could not reach and the replicas that did not verify."""
        results, values, found, deadline = self.results, self.values, self.found, self.deadline
        unreachable: set[str] = set()
        corrupt: list[m.CorruptReplica] = []
        attempt = 0
        entries = list(map(found.__getitem__, todo))  # (columns taken in C: no field read per key)
        expected = dict(zip(todo, map(checksum_of, entries), strict=True))
        sizes = dict(zip(todo, map(size_of, entries), strict=True))
        peers: dict[str, Peer | NotInTime | None] = {}  # (one lookup per engine, not per key)
        read = Op.READ
        while todo:
            if deadline is not None and deadline.passed():
                for i in todo:
                    results[i] = LATE
                break
            wheres: list[m.Location] = list(map(operator.itemgetter(attempt), map(choices.__getitem__, todo)))
            engines = list(map(engine_of, wheres))
            needed = set(engines) - peers.keys()
            peers.update(self.tools.peers.open_all(needed, deadline))  # (their handshakes at once)
            requests = TransferBatch()
            for i, where, engine in zip(todo, wheres, engines, strict=True):
                peer = peers[engine]
                if peer is None:
                    requests.fail(i, engine)
                    continue
                if not isinstance(peer, Peer):  # its handshake outlasts the deadline (it goes on)
                    results[i] = LATE
                    continue
                addrs, lengths = values[i].pieces(sizes[i])
                requests.add_pieces(
                    i, read, addrs, lengths, peer, where.region_id, where.offset, where.slot, where.gen
                )
            # Keys are verified as their bytes land (still in cache), between copies this thread helps with.
            ended = list(requests.stream(self.tools.engine, expected, transfer_timeout(deadline)))
            todo = self._settle(ended, choices, attempt, attempted, unreachable, corrupt)
            attempt += 1
        return unreachable, corrupt

    def _settle(
        self,
        ended: list[tuple[int, int, bool | None]],
        choices: dict[int, list[Any]],
        attempt: int,
        attempted: set[int],
        unreachable: set[str],
        corrupt: list[m.CorruptReplica],
    ) -> list[int]:
        """Each key's outcome of a round's reads; returns the keys to try on their next replica."""
        results, values, found, stats = self.results, self.values, self.found, self.tools.stats
        # Keys the engine could not verify (GPU memory, several requests) are hashed in one call.
        unchecked = [i for i, code, verified in ended if code == OK and verified is None]
        hashed: dict[int, bool] = {}
        if unchecked:
            digests = checksums([values[i] for i in unchecked], [found[i].size for i in unchecked])
            hashed = {i: d == found[i].checksum for i, d in zip(unchecked, digests, strict=True)}
        retry = []
        for i, code, verified in ended:
            if code == OK and (verified if verified is not None else hashed[i]):
                results[i] = found[i].size
                stats.hits += 1
                continue
            if code == TIMED_OUT and self.deadline is not None:  # (the engine's timeout is the deadline)
                results[i] = LATE
                continue
            where: m.Location = choices[i][attempt]
            attempted.add(i)
            if code == STALE:  # the node fenced that allocation off: the location is out of date
                stats.stale_locations += 1
            elif code != OK:
                stats.replica_failures += 1
                unreachable.add(where.engine)
            else:
                stats.checksum_mismatches += 1
                corrupt.append(
                    m.CorruptReplica(
                        self.keys[i], where.engine, where.region_id, where.offset, found[i].checksum
                    )
                )
            if attempt + 1 < len(choices[i]):
                retry.append(i)
        return retry
