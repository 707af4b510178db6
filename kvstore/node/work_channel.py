"""A storage node's one channel of work from the master (AwaitWork): a long poll on a thread of its own
that brings kills, holds, replica copies, disk drops and orders and checksum checks, and carries back what
the node did.

Results are reported as they come (a finished copy or disk batch sends them at once, in a call that does
not wait) and every other call carries what is left: each report goes out in bounded chunks, so a large
backlog is sent in turns and never overflows the request bound the master enforces. A reply from a
master of an older epoch than the newest this node has seen (a deposed leader) is dropped unread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import cast

from kvstore.cluster.session import Session
from kvstore.errors import KVStoreError, NotFoundError
from kvstore.rpc import messages as m

log = logging.getLogger("kvstore.node")

POLL_SECONDS = 2.0  # how long one AwaitWork waits for work before asking again

FenceHandler = Callable[[list[m.FenceOrder]], list[int]]  # applies kills; returns the ids applied
HoldHandler = Callable[[list[m.HeldReplica]], None]
CopyHandler = Callable[[list[m.CopyTask]], None]
CheckHandler = Callable[[list[m.ChecksumCheck]], list[tuple[int, bool]]]  # (check, bytes intact)
DiskHandler = Callable[[list[m.DiskDrop], list[m.DiskOrder]], None]


class WorkChannel:
    def __init__(
        self,
        session: Session,
        fences: FenceHandler,
        holds: HoldHandler,
        copies: CopyHandler,
        checks: CheckHandler,
    ) -> None:
        self.session = session
        self._fences, self._holds, self._copies, self._checks = fences, holds, copies, checks
        self.disk: DiskHandler | None = None  # set by the node's disk worker, if it has one
        self._lock = threading.Lock()  # the outbox below
        self._acked: list[int] = []  # kills applied, to acknowledge
        self._held_through = 0  # the last hold received and kept
        self._dropped_through = 0  # the last disk drop the disk has persisted (report_dropped)
        self._copied: list[tuple[int, bool]] = []
        self._disk_done: list[tuple[int, bool]] = []
        self._checked: list[tuple[int, bool]] = []
        self._registration = 0  # the registration the reports above belong to (RegisterReply's)
        self._dispatching = threading.Lock()  # replies are handled one at a time, in arrival order
        self._thread = threading.Thread(target=self._poll_loop, name="kvstore-work", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- reports --------------------------------------------------------------------------------------
    def report_copy(self, task: int, ok: bool) -> None:
        with self._lock:
            self._copied.append((task, ok))
        self.flush()

    def report_disk(self, results: list[tuple[int, bool]]) -> None:
        with self._lock:
            self._disk_done += results
        self.flush()

    def report_dropped(self, through: int, registration: int) -> None:
        """The disk has persisted every drop numbered up to `through` (received under `registration`):
        acknowledged only now, so a removal answered on it survives a SIGKILL of this node."""
        with self._lock:
            if registration != self._registration or through <= self._dropped_through:
                return  # another registration's numbering (the master restarted meanwhile), or old news
            self._dropped_through = through
        self.flush()

    @property
    def registration(self) -> int:
        """The registration the work being dispatched came under (the numbering of its drops)."""
        return self._registration

    def flush(self) -> None:
        """Sends what is waiting to be reported now (the poll may be parked at the master), and handles
        the work the replies bring, until nothing is left to report; what fails goes with the next call."""
        try:
            while self._exchange(0.0):
                pass
        except KVStoreError as exc:
            log.debug("work report failed (sent with the next call): %s", exc)

    # -- the poll -------------------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        s = self.session
        while not s.closed:
            try:
                self._exchange(0.0 if self._backlog() else POLL_SECONDS)
            except NotFoundError:  # the master forgot us (restarted, or a new leader): join it again now
                self._forget()
                try:
                    s.rejoin()  # registers and remounts, naming what the segment holds
                except KVStoreError as exc:
                    log.debug("joining the master again failed: %s", exc)
                    time.sleep(s.terms.heartbeat_interval)
            except KVStoreError as exc:
                if s.closed:
                    return
                log.debug("work poll failed: %s", exc)
                time.sleep(0.1)
            except Exception:  # a bug must cost one exchange, not the node's only channel of work
                # Nothing of the reply is lost: holds and kills are handed out until acknowledged,
                # copies and disk orders expire at the master and are planned again.
                log.exception("work poll failed unexpectedly; asking again")
                time.sleep(1.0)

    def _backlog(self) -> bool:
        with self._lock:
            return bool(self._acked or self._copied or self._disk_done or self._checked)

    def _exchange(self, wait: float) -> bool:
        """One AwaitWork; True when reports are waiting to go still (held back by the bounds, or made by
        the work this reply brought: kills applied)."""
        s = self.session
        with self._lock:
            registration = s.terms.registration
            if registration != self._registration:  # registered again (by any thread): a new numbering
                self._reset()
                self._registration = registration
            acked, self._acked = self._acked[: m.FENCE_BATCH], self._acked[m.FENCE_BATCH :]
            copied, self._copied = self._copied[: m.RESULTS_BATCH], self._copied[m.RESULTS_BATCH :]
            done, self._disk_done = self._disk_done[: m.RESULTS_BATCH], self._disk_done[m.RESULTS_BATCH :]
            checked, self._checked = self._checked[: m.RESULTS_BATCH], self._checked[m.RESULTS_BATCH :]
            request = m.AwaitWork(
                client_id=s.client_id,
                wait=wait,
                epoch=s.master.epoch,
                acked=acked,
                held_through=self._held_through,
                copied=copied,
                disk_done=done,
                checked=checked,
                dropped_through=self._dropped_through,
                registration=registration,
            )
        try:
            work: m.NodeWork = s.master.call(request, timeout=wait + s.config.rpc_timeout, long_poll=wait > 0)
        except NotFoundError:
            raise  # the master forgot us: nothing of this is worth sending again
        except KVStoreError:
            with self._lock:  # sent again with the next call (a report the master already had is ignored)
                self._acked[:0], self._copied[:0], self._disk_done[:0] = acked, copied, done
                self._checked[:0] = checked
            raise
        if work.epoch < s.master.epoch:
            log.warning("dropped work from a deposed leader (epoch %d < %d)", work.epoch, s.master.epoch)
        else:
            self._dispatch(work)
        return self._backlog()

    def _dispatch(self, work: m.NodeWork) -> None:
        with self._dispatching:
            holds = cast(list[m.HeldReplica], work.holds)  # decode_reply made each one
            if holds:
                self._holds(holds)
            applied = self._fences(work.fences) if work.fences else []
            with self._lock:
                self._held_through = max((h.seq for h in holds), default=self._held_through)
                if applied:  # a kill handed out again is acknowledged once
                    self._acked = list(dict.fromkeys(self._acked + applied))
            if work.copies:
                self._copies(work.copies)
            if work.checks:
                checked = self._checks(work.checks)
                with self._lock:
                    self._checked += checked
            if work.disk_drops or work.disk_orders:
                if self.disk is not None:  # it reports the drops once persisted (report_dropped)
                    self.disk(work.disk_drops, work.disk_orders)
                else:  # no disk here (the master lost track): its orders fail, its drops have nothing to do
                    with self._lock:
                        self._disk_done += [(o.order, False) for o in work.disk_orders]
                        seqs = [d.seq for d in work.disk_drops]
                        self._dropped_through = max(self._dropped_through, *seqs, 0)

    def _forget(self) -> None:
        with self._lock:
            self._reset()

    def _reset(self) -> None:
        """Drops the reports (the lock held): they count in a registration that is over."""
        self._registration = 0
        self._acked, self._copied, self._disk_done, self._held_through = [], [], [], 0
        self._dropped_through = 0
        self._checked = []
