"""A storage node: contributes a segment of pre-faulted memory to the pool (later disk and pinned tiers)
and executes the replica copies the master places on it, on worker threads of its own (never on the
heartbeat thread, which must keep the process alive while a copy waits on a slow peer).

`kvstore node` runs one in its own process; a `Store` client that contributes memory runs one beside it
on the same Session.
"""

from __future__ import annotations

import logging
import queue
import threading

import xxhash

from kvstore.client.session import Session
from kvstore.errors import KVStoreError
from kvstore.rpc import messages as m
from transfer_engine import Op, RequestState

log = logging.getLogger("kvstore.node")


class StorageNode:
    def __init__(self, session: Session, segment_size: int, copy_workers: int = 1) -> None:
        self.session = session
        engine = session.engine
        self.segment = engine.allocate(segment_size)  # pre-faulted, shareable with same-host peers
        self._tasks: queue.Queue[m.CopyTask | None] = queue.Queue()
        self._workers = [
            threading.Thread(target=self._copy_loop, name=f"kvstore-copy-{i}", daemon=True)
            for i in range(copy_workers)
        ]
        self.mount()
        session.on_reply(self._take_tasks)
        session.on_rejoin(self.mount)
        for w in self._workers:
            w.start()

    def mount(self) -> None:
        """Offers the segment to the master (again, after the master forgot this process)."""
        s = self.session
        s.master.call(
            m.MountSegment(
                client_id=s.client_id,
                engine=s.engine.name,
                region_id=self.segment.id,
                size=self.segment.length,
                host_id=s.host_id,
            )
        )

    def _take_tasks(self, reply: m.HeartbeatReply) -> None:
        for task in reply.tasks:
            self._tasks.put(task)

    def _copy_loop(self) -> None:
        while (task := self._tasks.get()) is not None:
            ok = self._copy(task)  # the master counts copies done and failed
            try:
                self.session.master.call(
                    m.ReplicaDone(client_id=self.session.client_id, task=task.task, ok=ok)
                )
            except KVStoreError as exc:  # the master expires the task and frees its space by itself
                log.debug("cannot report copy %d: %s", task.task, exc)

    def _copy(self, task: m.CopyTask) -> bool:
        """Reads the replica from its source into our segment and verifies it before reporting it."""
        array = self.segment.array
        if array is None or not 0 <= task.offset <= self.segment.length - task.size:
            return False
        source = self.session.peer(task.source.engine)
        if source is None:
            return False
        try:
            state, _ = self.session.engine.transfer_one(
                Op.READ,
                self.segment.addr + task.offset,
                source,
                task.source.region_id,
                task.source.offset,
                task.size,
            )
        except KVStoreError as exc:
            log.debug("replica copy %d failed: %s", task.task, exc)
            return False
        view = array[task.offset : task.offset + task.size]
        return state == RequestState.COMPLETED and xxhash.xxh3_64_intdigest(view.data) == task.checksum

    def close(self) -> None:
        """Stops the copy workers (a copy in flight finishes first)."""
        for _ in self._workers:
            self._tasks.put(None)
        for w in self._workers:
            w.join(timeout=10)
