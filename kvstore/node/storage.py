"""A storage node: contributes a segment of pre-faulted memory to the pool (and a disk tier under it)
and does the work the master sends on its work channel (kvstore.node.work_channel): fences, holds, and
replica copies, the copies on worker threads of their own (never on the channel's or the heartbeat's
thread, which must go on while a copy waits on a slow peer).

`kvstore node` runs one in its own process; a `Store` client that contributes memory runs one beside it
on the same Session.
"""

from __future__ import annotations

import logging
import queue
import threading

import xxhash

from kvstore.client.session import Session
from kvstore.config import NodeConfig
from kvstore.errors import KVStoreError
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.disk import DiskWorker
from kvstore.node.segment_memory import ready_segment
from kvstore.node.work_channel import WorkChannel
from kvstore.rpc import messages as m
from transfer_engine import Op, Region, RequestState, TransferEngine

log = logging.getLogger("kvstore.node")

FENCE_DRAIN_SECONDS = 0.05  # how long a kill waits for copies admitted before it (else: retried)
KILL_CHUNK = 1 << 20  # fence slots killed per call when a node mounts again with objects it holds


def prepare_segment(engine: TransferEngine, config: NodeConfig, backing_file: str = "") -> Region:
    """The memory a node with `config` contributes, every page faulted in (kvstore.node.segment_memory);
    `backing_file`: in that shared-memory file (its bytes kept when it has the segment's size)."""
    size = config.segment_size
    return ready_segment(engine, size, fence_slots_for(size), config.pinned, backing_file)


def fence_slots_for(segment_size: int) -> int:
    """Fence table entries (16 bytes each) for a segment: one per 2 KiB (0.8% of it), so objects of
    2 KiB or more fill the segment before its allocations run out of slots."""
    return max(4096, min(segment_size // 2048, 1 << 26))


class StorageNode:
    def __init__(
        self,
        session: Session,
        config: NodeConfig,
        segment: Region | None = None,
        catalog: SegmentCatalog | None = None,
    ) -> None:
        """A node contributing `config.segment_size` bytes (pinned if asked), with `config.copy_workers`
        copy threads, and a disk tier under it when `config.disk` names one. `segment`: its memory,
        readied before the session joined (prepare_segment); else readied now. `catalog`: what the
        segment holds (kept in a file beside a shared-memory segment); else one in memory."""
        self.session = session
        self.catalog = catalog if catalog is not None else SegmentCatalog()
        self.kept = 0  # objects the last mount named back to the master and it took
        copy_workers, pinned = config.copy_workers, config.pinned
        # Pre-faulted, shareable with same-host peers, carved into fenced allocations by the master;
        # page-locked when pinned (the engine says how: CUDA host registration or mlock).
        self.segment = segment or prepare_segment(session.engine, config)
        if pinned:
            log.info("segment of %d bytes pinned by %s", self.segment.length, self.segment.pinned_by)
        self._tasks: queue.Queue[m.CopyTask | None] = queue.Queue()
        self._workers = [
            threading.Thread(target=self._copy_loop, name=f"kvstore-copy-{i}", daemon=True)
            for i in range(copy_workers)
        ]
        self.mount()
        session.on_rejoin(self.mount)
        for w in self._workers:
            w.start()
        self.work = WorkChannel(session, self._apply_fences, self._hold, self._queue_copies)
        self.disk: DiskWorker | None = None
        if config.disk:
            self.disk = DiskWorker(
                session,
                self.work,
                self.segment,
                config.disk,
                config.disk_size,
                config.disk_backend,
                config.disk_staging,
                pinned=pinned,
            )
        self.work.start()  # once the disk worker, if any, takes its orders

    def mount(self) -> None:
        """Offers the segment to the master (again, after the master or this node restarted), naming the
        objects it still holds (the catalog, each checked against its checksum). Every other allocation
        handed out before, by this master or an earlier one, is fenced off first, so a late writer or a
        reader with an old location cannot touch what the master now hands out afresh."""
        s = self.session
        held = self.catalog.verified(self.segment.array) if self.segment.array is not None else []
        self._fence_all_but(held)
        segment_id = s.master.call(
            m.MountSegment(
                client_id=s.client_id,
                engine=s.engine.name,
                region_id=self.segment.id,
                size=self.segment.length,
                host_id=s.host_id,
                fence_slots=fence_slots_for(self.segment.length),
                restoring=bool(held),
            )
        )
        refused: list[tuple[int, int]] = []
        for at in range(0, len(held), m.FENCE_BATCH):
            chunk = held[at : at + m.FENCE_BATCH]
            last = at + m.FENCE_BATCH >= len(held)
            request = m.RestoreSegment(client_id=s.client_id, segment_id=segment_id, records=chunk, last=last)
            refused_slots = set(s.master.call(request))
            refused += [(r[1], r[2]) for r in chunk if r[1] in refused_slots]
        if refused:
            slots, gens = [r[0] for r in refused], [r[1] for r in refused]
            while not s.engine.kill_allocations(self.segment, slots, gens, timeout=FENCE_DRAIN_SECONDS):
                log.warning("a peer's copy into the segment has not ended; waiting to fence it")
            self.catalog.drop(slots, gens)
        self.kept = len(held) - len(refused)
        if held:
            log.info("segment mounted with %d objects it held (%d refused)", self.kept, len(refused))

    def _fence_all_but(self, held: list[tuple[int, int, int, str, int, int, bool, int]]) -> None:
        """Kills every allocation of the segment handed out so far but the `held` ones (each stays alive
        in its own generation only)."""
        s = self.session
        engine, segment = s.engine, self.segment
        if not held:
            while not engine.raise_fence_floor(segment, s.terms.generation, timeout=FENCE_DRAIN_SECONDS):
                log.warning("a peer's copy into the segment has not ended; waiting before mounting it")
            return
        keep = {r[1]: r[2] for r in held}
        table = fence_slots_for(segment.length)
        for start in range(0, table, KILL_CHUNK):  # a large segment has tens of millions of slots
            slots = range(start, min(start + KILL_CHUNK, table))
            gens = [keep[i] - 1 if i in keep else s.terms.generation for i in slots]
            while not engine.kill_allocations(segment, slots, gens, timeout=FENCE_DRAIN_SECONDS):
                log.warning("a peer's copy into the segment has not ended; waiting before mounting it")

    def _apply_fences(self, orders: list[m.FenceOrder]) -> list[int]:
        """Applies the master's kills to the segment; returns the ids of those applied (to acknowledge)."""
        engine, applied = self.session.engine, []
        for order in orders:
            if order.region_id != self.segment.id:
                applied += order.kills  # a region gone since: nothing there to fence
            elif engine.kill_allocations(
                order.region_id, order.slots, order.gens, timeout=FENCE_DRAIN_SECONDS
            ):
                self.catalog.drop(order.slots, order.gens)
                applied += order.kills
            # else a copy admitted before is still running (a stopped peer): the master keeps the space
            # and hands the kills out again
        return applied

    def _hold(self, holds: list[m.HeldReplica]) -> None:
        self.catalog.hold(h for h in holds if h.region_id == self.segment.id)

    def _queue_copies(self, tasks: list[m.CopyTask]) -> None:
        for task in tasks:
            self._tasks.put(task)

    def _copy_loop(self) -> None:
        while (task := self._tasks.get()) is not None:
            self.work.report_copy(task.task, self._copy(task))  # the master counts copies done and failed

    def _copy(self, task: m.CopyTask) -> bool:
        """Reads the replica from its source into our segment and verifies it before reporting it."""
        array = self.segment.array
        if array is None or not 0 <= task.offset <= self.segment.length - task.size:
            return False
        source = self.session.peer(task.source.engine)
        if source is None:
            return False
        engine = self.session.engine
        try:
            # The destination is ours: hold its allocation, so the master's kill of an expired task
            # waits for this copy rather than frees space under it.
            with engine.fenced(self.segment, task.slot, task.gen):
                state, _ = engine.transfer_one(
                    Op.READ,
                    self.segment.addr + task.offset,
                    source,
                    task.source.region_id,
                    task.source.offset,
                    task.size,
                    fence=(task.source.slot, task.source.gen),
                )
        except KVStoreError as exc:
            log.debug("replica copy %d failed: %s", task.task, exc)
            return False
        view = array[task.offset : task.offset + task.size]
        return state == RequestState.COMPLETED and xxhash.xxh3_64_intdigest(view.data) == task.checksum

    def close(self, forget: bool = False) -> None:
        """Stops the copy workers and the disk worker (work in flight finishes first); `forget`: the
        catalog's file goes too (the node leaves: its objects are not to be restored)."""
        self.catalog.close(remove=forget)
        if self.disk is not None:
            self.disk.close()
        for _ in self._workers:
            self._tasks.put(None)
        for w in self._workers:
            w.join(timeout=10)
