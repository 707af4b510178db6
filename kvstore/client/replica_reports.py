"""What this process's reads and writes found of replicas: engines it could not reach (its own reads try
their replicas last for a while) and corrupt replicas, told to the master."""

from __future__ import annotations

import logging
import time

from kvstore.cluster.session import Session
from kvstore.errors import KVStoreError
from kvstore.rpc import messages as m

log = logging.getLogger("kvstore.client")

AVOID_UNREACHABLE_SECONDS = 10.0  # a node this process could not reach is read from last for this long


class ReplicaReports:
    def __init__(self, session: Session) -> None:
        self.session = session
        # engines this process failed to reach -> until when its reads try their replicas last: the master
        # acts on one client's report only once another client or the node's silence confirms it
        self._unreachable: dict[str, float] = {}

    def avoid(self) -> set[str]:
        """The engines this process could not reach lately (its reads try them last)."""
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

    def report(self, unreachable: set[str], corrupt: list[m.CorruptReplica]) -> None:
        """Tells the master what this read or write found (best effort: the call's results stand)."""
        if not unreachable and not corrupt:
            return
        until = time.monotonic() + AVOID_UNREACHABLE_SECONDS
        self._unreachable.update(dict.fromkeys(unreachable, until))
        engines = sorted(unreachable)
        report = m.ReportReplicas(self.session.client_id, engines, corrupt)
        try:
            self.session.master.call(report)
        except KVStoreError as exc:
            log.debug("could not report unreachable/corrupt replicas: %s", exc)
