"""A storage node: contributes its tiers to the pool (a segment of pre-faulted memory, and a disk under
it: kvstore.node.tiers) and does the work the master sends on its work channel
(kvstore.node.work_channel): fences, holds, replica copies and disk orders, the copies on worker threads
of their own (never on the channel's or the heartbeat's thread, which must go on while a copy waits on a
slow peer).

`kvstore node` runs one in its own process; a `Store` client that contributes memory runs one beside it
on the same Session.
"""

from __future__ import annotations

import logging
import queue
import threading

from kvstore.cluster.session import Session
from kvstore.config import NodeConfig
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.disk import DiskWorker
from kvstore.node.memory_tier import MemoryTier, prepare_segment
from kvstore.node.tiers import NodeTier
from kvstore.node.work_channel import WorkChannel
from kvstore.rpc import messages as m
from transfer_engine import Region

log = logging.getLogger("kvstore.node")


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
        # Pre-faulted, shareable with same-host peers, carved into fenced allocations by the master;
        # page-locked when pinned (the engine says how: CUDA host registration or mlock).
        self.memory = MemoryTier(
            session,
            segment or prepare_segment(session.engine, config),
            catalog if catalog is not None else SegmentCatalog(),
        )
        self.segment = self.memory.segment
        if config.pinned:
            log.info("segment of %d bytes pinned by %s", self.segment.length, self.segment.pinned_by)
        self._tasks: queue.Queue[m.CopyTask | None] = queue.Queue()
        self._workers = [
            threading.Thread(target=self._copy_loop, name=f"kvstore-copy-{i}", daemon=True)
            for i in range(config.copy_workers)
        ]
        memory = self.memory
        self.work = WorkChannel(session, memory.apply_fences, memory.hold, self._queue_copies, memory.check)
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
                pinned=config.pinned,
            )
        # The disk mounts first (its constructor did), so a master taking back what the memory holds
        # knows a disk works under it: above its watermark it evicts only objects the disk holds too,
        # never the only copy. Likewise after a restart of the master (or a new leader).
        self.tiers: list[NodeTier] = [self.memory] if self.disk is None else [self.disk, self.memory]
        self.memory.mount()
        for tier in self.tiers:
            session.on_rejoin(tier.mount)
        for w in self._workers:
            w.start()
        self.work.start()  # once the disk worker, if any, takes its orders

    @property
    def kept(self) -> int:
        """Objects the memory tier's last mount named back to the master and it took."""
        return self.memory.kept

    def _queue_copies(self, tasks: list[m.CopyTask]) -> None:
        for task in tasks:
            self._tasks.put(task)

    def _copy_loop(self) -> None:
        while (task := self._tasks.get()) is not None:
            # the master counts copies done and failed
            self.work.report_copy(task.task, self.memory.copy_in(task))

    def close(self, forget: bool = False) -> None:
        """Stops the tiers and the copy workers (work in flight finishes first); `forget`: nothing is to be
        restored (the node leaves)."""
        for tier in self.tiers:
            tier.close(forget)
        for _ in self._workers:
            self._tasks.put(None)
        for w in self._workers:
            w.join(timeout=10)
