"""A storage node's disk tier: one preallocated file opened for direct I/O, and the worker that carries
out the master's disk orders (kvstore.master.disk_tier) on it.

Each object on disk is a record (kvstore.rpc.disk_record): a header page, then the object's bytes.
Records are checked in full when read back: a torn, stale or corrupt record fails the load (the reader
gets a miss), never bytes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time

import numpy as np

from kvstore.cluster.session import Session
from kvstore.errors import KVStoreError, StaleLocationError
from kvstore.node import file_lock
from kvstore.node.disk_index import DiskIndex, IndexEntry
from kvstore.node.work_channel import WorkChannel
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import PAGE, data_offset, header_matches, record_bytes, write_header
from transfer_engine import Op, Region, RequestState, checksum
from transfer_engine.disk import DiskFile
from transfer_engine.errors import CODE_NAMES

log = logging.getLogger("kvstore.node.disk")

POLL_SECONDS = 2.0
PROBE_SECONDS = 1.0  # how often a degraded disk tries whether writes work again
PROBE_ROOM = 256 << 10  # bytes the index must take in one append before demotions resume


def disk_records(entries: list[IndexEntry]) -> list[m.DiskRecord]:
    """The records a restarted disk offers back (RestoreDisk.records) for its index's intact entries."""
    return [
        m.DiskRecord(offset=e.offset, key=e.key, size=e.size, checksum=e.checksum, gen=e.gen) for e in entries
    ]


class DiskWorker:
    """A node's disk tier (kvstore.node.tiers.NodeTier): mounts the disk with the master, offering back
    the records that read back intact, and runs its orders: demote (write a record from a memory
    replica) and load (read a record into an allocation of this node's segment), each verified."""

    tier, name = m.DISK, "disk"

    def __init__(
        self,
        session: Session,
        work: WorkChannel,
        segment: Region,
        path: str,
        size: int,
        backend: str,
        staging: int,
        pinned: bool = False,
    ) -> None:
        self.session = session
        self.work = work
        self.segment = segment
        self._held = file_lock.hold(path, "disk")  # one node per disk file (and its index)
        try:
            self.file = DiskFile(path, size, backend=backend, depth=32)
        except BaseException:
            file_lock.release(self._held)
            raise
        # Page-aligned and registered; page-locked too on a pinned node (the pinned pool stages disk I/O).
        self.staging = session.engine.allocate(staging, export=False, pinned=pinned)
        self.index = DiskIndex(path + ".index")
        # The file as a region of kind file: readers on other hosts read records from it over TCP.
        self.served = session.engine.register_file(path, export=True)
        self._io = threading.Lock()  # the staging area: orders, and a re-mount's check of the records
        self._closed = False
        # Why writes fail ("" while they work): the master was told and demotes nothing here meanwhile;
        # a probe every PROBE_SECONDS (index and the file's last page, kept for it) ends it.
        self.degraded = ""
        self._probed = 0.0
        self._unforgotten: set[tuple[int, str]] = set()  # dropped records the index could not mark
        self._drops: list[m.DiskDrop] = []  # records the master dropped, not marked dead yet
        self._drops_of = 0  # the registration they came under (their numbering), and the last one taken
        self._taken_through = 0
        self._persisted: tuple[int, int] | None = None  # (registration, seq) marked dead, not yet reported
        self._drops_lock = threading.Lock()
        self._told = ""  # the state the master last heard
        self.restored = 0  # records offered back at the last mount, and how many the checks dropped
        self.dropped = 0
        self.mount()
        log.info(
            "disk tier %s: %d bytes, I/O by %s; %d records restored, %d dropped",
            path,
            self.file.size,
            self.file.backend,
            self.restored,
            self.dropped,
        )
        self._queue: queue.Queue[tuple[list[m.DiskDrop], list[m.DiskOrder]] | None] = queue.Queue()
        work.disk = self._take  # the node's work channel brings the orders
        self._thread = threading.Thread(target=self._loop, name="kvstore-disk", daemon=True)
        self._thread.start()

    def mount(self) -> None:
        """Mounts the disk and offers back the records it holds intact (after a restart of this node or
        of the master); the index is rewritten with just those."""
        s = self.session
        self._forget_taken()  # drops the master sent before: never offered back
        with self._io:  # checked before mounting: the mount says records follow
            intact = self._intact(self.index.read())
            self.index.rewrite(intact)
            removed = self.index.removed()
        s.master.call(
            m.MountDisk(
                client_id=s.client_id,
                size=self.file.size - PAGE,  # the last page is the probe's
                host_id=s.host_id,
                path=os.path.abspath(self.file.path),
                engine=s.engine.name,
                file_region=self.served.id,
                restoring=bool(intact or removed),
            )
        )
        self._told = ""  # a disk mounts healthy: the loop tells the master if it is not
        self.restored = 0
        # The removals it remembers go first (what they cover is refused whichever node names it), in
        # calls of their own, then the records.
        calls: list[tuple[list[IndexEntry], list[m.Removal]]] = [
            ([], removed[i : i + m.FENCE_BATCH]) for i in range(0, len(removed), m.FENCE_BATCH)
        ]
        calls += [(intact[i : i + 4096], []) for i in range(0, len(intact), 4096)]
        for n, (entries, tombs) in enumerate(calls):
            request = m.RestoreDisk(
                client_id=s.client_id, records=disk_records(entries), last=n == len(calls) - 1, removed=tombs
            )
            self.restored += s.master.call(request)

    def _intact(self, entries: list[IndexEntry]) -> list[IndexEntry]:
        """The entries whose records read back whole: header naming them, bytes matching the checksum."""
        intact: list[IndexEntry] = []
        batches, _outside = self._pack([(e.offset, e.size) for e in entries])
        for batch in batches:
            chosen = [entries[i] for i, _ in batch]
            at = [a for _, a in batch]
            codes = self.file.run(
                [False] * len(chosen),
                [self.staging.addr + a for a in at],
                [e.offset for e in chosen],
                [record_bytes(e.size) for e in chosen],
            ).tolist()
            sums = checksum.xxh3_each(
                [self.staging.addr + data_offset(a) for a in at], [e.size for e in chosen]
            )
            for e, a, code, digest in zip(chosen, at, codes, sums, strict=True):
                if (
                    code == 0
                    and header_matches(self._view(a, PAGE), e.key, e.size, e.checksum)
                    and digest == e.checksum
                ):
                    intact.append(e)
        self.dropped = len(entries) - len(intact)
        return intact

    def _pack(self, records: list[tuple[int, int]]) -> tuple[list[list[tuple[int, int]]], list[int]]:
        """Records given as (disk offset, object size), packed into batches that fit the staging area
        together: per batch (index, staging offset) pairs; and the indices that fit neither the file nor
        the staging area."""
        batches: list[list[tuple[int, int]]] = [[]]
        outside: list[int] = []
        used = 0
        for i, (offset, size) in enumerate(records):
            need = record_bytes(size)
            if offset + need > self.file.size or need > self.staging.length:
                outside.append(i)
                continue
            if used + need > self.staging.length:
                batches.append([])
                used = 0
            batches[-1].append((i, used))
            used += need
        return [b for b in batches if b], outside

    def _take(self, drops: list[m.DiskDrop], orders: list[m.DiskOrder]) -> None:
        # Drops wait apart from the orders: a mount (the master restarted) applies them before it offers
        # the records back, even while the loop is busy with an order.
        if drops:
            registration = self.work.registration
            with self._drops_lock:
                if registration != self._drops_of:  # a new master's numbering
                    self._drops_of, self._taken_through = registration, 0
                # The master sends a drop until it is acknowledged, which is only once it is persisted.
                fresh = [d for d in drops if d.seq > self._taken_through]
                self._drops += fresh
                self._taken_through = max(self._taken_through, *(d.seq for d in fresh), 0)
        self._queue.put(([], orders))

    def _forget_taken(self) -> None:
        """Applies the drops taken so far (in the order they came, before any order after them), then
        acknowledges them: only a drop persisted (its record marked dead in the index, or its header
        zeroed) is acknowledged, so a removal answered on it never comes back from this disk."""
        with self._drops_lock:
            drops, self._drops = self._drops, []
            registration = self._drops_of
        if drops:
            try:
                self._forget([(d.offset, d.key, d.buried) for d in drops])
            except BaseException:
                with self._drops_lock:  # not persisted: applied again with the next work
                    if self._drops_of == registration:
                        self._drops[:0] = drops
                raise
            self._persisted = (registration, max(d.seq for d in drops))
        self._report_drops()

    def _report_drops(self) -> None:
        """Acknowledges the drops persisted, once none before them is waiting for the index (a probe)."""
        persisted = self._persisted
        if persisted is None or self._unforgotten:
            return
        self._persisted = None
        self.work.report_dropped(persisted[1], persisted[0])

    def _loop(self) -> None:
        """Runs the orders in the order they came (drops first: an order may reuse a dropped record's
        space), reporting each batch's results at once; probes a degraded disk meanwhile."""
        while not self._closed:
            try:
                work = self._queue.get(timeout=PROBE_SECONDS if self.degraded else POLL_SECONDS)
            except queue.Empty:
                work = None
            orders: list[m.DiskOrder] = []
            try:
                if work is not None:
                    _, orders = work
                    self._forget_taken()
                    self.work.report_disk([(r.order, r.ok) for r in self.run(orders)])
                    orders = []
                if self._told != self.degraded:  # a report that did not reach the master, or a new one
                    self._report(self.degraded)
                if self.degraded and time.monotonic() - self._probed >= PROBE_SECONDS:
                    self._probe()
            except OSError as exc:  # the file system: full, read-only
                self._degrade(f"disk I/O failed: {exc}")
                if orders:
                    self.work.report_disk([(o.order, False) for o in orders])
            except KVStoreError as exc:  # the engine refused a batch: its orders failed, the next may not
                log.warning("disk orders failed: %s", exc)
                if orders:
                    self.work.report_disk([(o.order, False) for o in orders])

    # -- orders ---------------------------------------------------------------------------------------
    def run(self, orders: list[m.DiskOrder]) -> list[m.DiskResult]:
        """Runs orders in batches that fit the staging area; one result per order."""
        with self._io:
            return self._run(orders)

    def _run(self, orders: list[m.DiskOrder]) -> list[m.DiskResult]:
        ok = [False] * len(orders)
        batches, _outside = self._pack([(o.disk_offset, o.size) for o in orders])  # the outside ones fail
        for batch in batches:
            try:
                for kind, run in (("demote", self._demote), ("load", self._load)):
                    mine = [(i, a) for i, a in batch if orders[i].kind == kind]
                    done = run([orders[i] for i, _ in mine], [a for _, a in mine])
                    for (i, _), good in zip(mine, done, strict=True):
                        ok[i] = good
            except KVStoreError as exc:  # the disk or the engine failed as a whole: these orders fail
                log.warning("disk orders failed: %s", exc)
        return [m.DiskResult(o.order, good) for o, good in zip(orders, ok, strict=True)]

    def _view(self, at: int, nbytes: int) -> np.ndarray:
        assert self.staging.array is not None
        return self.staging.array[at : at + nbytes]

    def _demote(self, orders: list[m.DiskOrder], at: list[int]) -> list[bool]:
        """Reads each object from its memory replica, checks it, and writes its record. A replica in this
        node's own segment that is whole pages at a page boundary is written from where it lies (its
        allocation held live meanwhile): no copy into staging, only its header page comes from there."""
        if not orders:
            return []
        ok = [False] * len(orders)
        headed = [
            i
            for i, order in enumerate(orders)
            if write_header(self._view(at[i], PAGE), order.key, order.size, order.checksum)
        ]
        with contextlib.ExitStack() as held:
            in_place = self._hold_own(orders, headed, held)  # order -> address of its bytes
            data = {**in_place, **self._fetch(orders, at, [i for i in headed if i not in in_place])}
            chosen = sorted(data)
            sums = checksum.xxh3_each([data[i] for i in chosen], [orders[i].size for i in chosen])
            writes = [i for i, digest in zip(chosen, sums, strict=True) if digest == orders[i].checksum]
            if not writes:
                return ok
            requests = []  # (order, address, disk offset, length)
            for i in writes:
                order = orders[i]
                if i in in_place:  # the header page from staging, the bytes from the segment
                    requests.append((i, self.staging.addr + at[i], order.disk_offset, PAGE))
                    requests.append((i, data[i], data_offset(order.disk_offset), order.size))
                else:  # fetched into staging after its header: the whole record from there
                    tail = record_bytes(order.size) - PAGE - order.size
                    self._view(data_offset(at[i]) + order.size, tail)[:] = 0
                    requests.append(
                        (i, self.staging.addr + at[i], order.disk_offset, record_bytes(order.size))
                    )
            codes = self.file.run(
                [True] * len(requests),
                [r[1] for r in requests],
                [r[2] for r in requests],
                [r[3] for r in requests],
            ).tolist()
        failed = {r[0] for r, code in zip(requests, codes, strict=True) if code}
        for i in writes:
            ok[i] = i not in failed
        bad = [c for c in codes if c]
        if bad:
            self._degrade(f"{len(bad)} record write(s) failed ({CODE_NAMES.get(bad[0], bad[0])})")
        # Named in the index only once written in full: a kill loses at most the records in flight. A
        # record the index cannot name would not survive a restart: its demotion fails.
        written = [i for i in writes if ok[i]]
        try:
            self.index.append(
                [
                    IndexEntry(o.disk_offset, o.key, o.size, o.checksum, o.memory.gen)
                    for o in (orders[i] for i in written)
                ]
            )
        except OSError as exc:
            self._degrade(f"disk index write failed: {exc}")
            for i in written:
                ok[i] = False
        return ok

    def _hold_own(
        self, orders: list[m.DiskOrder], chosen: list[int], held: contextlib.ExitStack
    ) -> dict[int, int]:
        """Orders whose replica is whole pages at a page boundary of this node's own segment: the address
        of their bytes, each allocation held live (fenced entry) until `held` closes."""
        engine = self.session.engine
        out: dict[int, int] = {}
        for i in chosen:
            where = orders[i].memory
            address = self.segment.addr + where.offset
            size = orders[i].size
            own = where.engine == engine.name and where.region_id == self.segment.id
            if not own or address % PAGE or size % PAGE or where.offset + size > self.segment.length:
                continue
            try:
                held.enter_context(engine.fenced(self.segment, where.slot, where.gen))
            except StaleLocationError:
                continue  # freed meanwhile: the order fails
            out[i] = address
        return out

    def _fetch(self, orders: list[m.DiskOrder], at: list[int], chosen: list[int]) -> dict[int, int]:
        """Reads these orders' replicas into staging (after their header page); the staging address of
        the bytes of each that arrived."""
        reads, peers = [], []
        for i in chosen:
            peer = self.session.peer(orders[i].memory.engine)
            if peer is not None:
                reads.append(i)
                peers.append(peer.handle)
        if not reads:
            return {}
        handle = self.session.engine.submit(
            Op.READ,
            [self.staging.addr + data_offset(at[i]) for i in reads],
            peers,
            [orders[i].memory.region_id for i in reads],
            [orders[i].memory.offset for i in reads],
            [orders[i].size for i in reads],
            fence_slots=[orders[i].memory.slot for i in reads],
            fence_gens=[orders[i].memory.gen for i in reads],
        )
        handle.wait()
        states = handle.states()
        return {
            i: self.staging.addr + data_offset(at[i])
            for j, i in enumerate(reads)
            if states[j] == RequestState.COMPLETED
        }

    def _load(self, orders: list[m.DiskOrder], at: list[int]) -> list[bool]:
        """Reads each record, checks it in full, and copies the object into this node's allocation."""
        if not orders:
            return []
        codes = self.file.run(
            [False] * len(orders),
            [self.staging.addr + a for a in at],
            [o.disk_offset for o in orders],
            [record_bytes(o.size) for o in orders],
        ).tolist()
        ok = [False] * len(orders)
        segment = self.segment.array
        assert segment is not None
        sums = checksum.xxh3_each([self.staging.addr + data_offset(a) for a in at], [o.size for o in orders])
        for i, order in enumerate(orders):
            placed = order.memory
            mine = placed.engine == self.session.engine.name and placed.region_id == self.segment.id
            if codes[i] != 0 or not mine or placed.offset + order.size > self.segment.length:
                continue
            data = self._view(data_offset(at[i]), order.size)
            header = self._view(at[i], PAGE)
            if not header_matches(header, order.key, order.size, order.checksum):
                continue
            if sums[i] != order.checksum:
                continue
            try:
                with self.session.engine.fenced(self.segment, placed.slot, placed.gen):
                    segment[placed.offset : placed.offset + order.size] = data
            except KVStoreError:  # the master gave the allocation up meanwhile
                continue
            ok[i] = True
        return ok

    def _forget(self, records: list[tuple[int, str, int]]) -> None:
        """Marks dropped (offset, key, buried) records dead in the index, so a restart never offers them
        back, and remembers their removals (DiskIndex.forget). When the index cannot be written, their
        header pages are zeroed now (before any new record can be ordered into their space), which a
        restart's checks refuse; failing that too, the index takes them once writes work again."""
        with self._io:
            try:
                self.index.forget(records)
                return
            except OSError as exc:
                self._degrade(f"disk index write failed: {exc}")
            zero = self._view(0, PAGE)
            zero[:] = 0
            codes = self.file.run(
                [True] * len(records),
                [self.staging.addr] * len(records),
                [r[0] for r in records],
                [PAGE] * len(records),
            ).tolist()
            self._unforgotten.update((r[0], r[1]) for r, code in zip(records, codes, strict=True) if code)

    def _probe(self) -> None:
        """Tries whether writes work again: the index rewritten (with what it could not take meanwhile),
        a real append of PROBE_ROOM bytes to it, and the file's probe page written. All three: the disk
        takes demotions again."""
        self._probed = time.monotonic()
        with self._io:
            try:
                self.index.rewrite_without(self._unforgotten)
                self.index.try_room(PROBE_ROOM)  # (a rewrite of a small index needs no new space)
            except OSError:
                return
            self._view(0, PAGE)[:] = 0
            if self.file.run([True], [self.staging.addr], [self.file.size - PAGE], [PAGE]).tolist() != [0]:
                return
            self._unforgotten.clear()
        log.warning("disk tier %s: writes work again; demotions resume", self.file.path)
        self._report("")
        self._report_drops()  # those that waited for the index

    def _degrade(self, reason: str) -> None:
        """Tells the master (once per episode) that this disk fails writes: it demotes nothing here and
        puts stop waiting for demotions, until a probe finds writes work again. Reads of records already
        written go on (each is checked)."""
        if self.degraded:
            return
        self.degraded = reason
        self._probed = time.monotonic()
        log.error("disk tier %s: %s; degraded (no demotions until writes work again)", self.file.path, reason)
        self._report(reason)

    def _report(self, reason: str) -> None:
        self.degraded = reason
        try:
            self.session.master.call(m.DiskDegraded(client_id=self.session.client_id, reason=reason))
            self._told = reason
        except KVStoreError as exc:
            log.warning("could not report the disk's state: %s", exc)

    @property
    def kept(self) -> int:
        return self.restored

    def close(self, forget: bool = False) -> None:
        """Stops after the orders in flight. The records stay, `forget` or not: the master forgets them
        when the node leaves, and a node started again on the disk offers the intact ones back."""
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=POLL_SECONDS + 5)
        self.file.close()
        file_lock.release(self._held)
