"""Suspicion of unreachable nodes: a client that fails to reach a node reports it, and the node's
segments become suspect (not placed on, their replicas not offered while another exists) only on
evidence that costs something, since a registration costs nothing and a member may lie. A report is
never evidence itself, whoever makes it and however many make it (one process can hold any number of
registrations and small segments): it only makes the master look. What is evidence:

- the node itself missed a heartbeat while reports stand: none for SILENT_INTERVALS intervals (judged
  again every housekeeping tick; one interval is no evidence, as a heartbeat comes a little after each);
- the master could not reach the node's engine itself, or found another process owning it (a probe
  through the engine's authenticated handshake, kvstore.master.service.mount_check, at most one per engine per
  heartbeat interval, run off the loop by the handlers).

A probe the engine answers as its owner's disproves the reports made before it began and trusts the
node's segments again; so does the node's next heartbeat, an interval after it became suspect
(kvstore.master.service.membership)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kvstore.config.master import MasterConfig
from kvstore.master.ledger.model import Client, Counters, Segment
from kvstore.master.planners.placement import SegmentSpace

REPORT_WINDOW = 3  # heartbeat intervals a client's report of an unreachable node counts for
SILENT_INTERVALS = 2  # heartbeat intervals without one after which a node's silence is evidence


class Suspicion:
    """The reports of unreachable engines and the master's own probes, and the suspicion they lead to."""

    def __init__(
        self,
        config: MasterConfig,
        clock: Callable[[], float],
        space: SegmentSpace,
        clients: Mapping[str, Client],
        counters: Counters,
    ) -> None:
        """`space`: the memory segments, made suspect and trusted here; `clients`: the registered ones (whose
        heartbeats are the evidence)."""
        self.config = config
        self.clock = clock
        self.space = space
        self.clients = clients
        self.counters = counters
        # engine -> reporting client -> when it last found that engine unreachable
        self._unreachable_reports: dict[str, dict[str, float]] = {}
        self._probes: dict[str, float] = {}  # engine -> when the master last began to probe it itself

    def heard_from(self, engine: str, now: float) -> None:
        """A heartbeat of the node serving `engine` came `now`: the reports of it made an interval or more
        before are disproved by it."""
        reports = self._unreachable_reports.get(engine)
        if reports:
            interval = self.config.heartbeat_interval
            for reporter in [c for c, when in reports.items() if now - when >= interval]:
                del reports[reporter]

    def report_unreachable(self, engine: str, reporter: str = "") -> str:
        """A client (`reporter`) failed to reach this engine. Returns the client id that owns the
        engine's segments when the master should probe the engine itself now (then probed() with what it
        found), else "". An engine with no segment here holds no replica a client was handed: its report
        is dropped (nor does a client fill the master with reports of made-up engines)."""
        segments = self._segments_of(engine)
        if not segments:
            return ""
        now = self.clock()
        self._unreachable_reports.setdefault(engine, {})[reporter] = now
        self._judge_unreachable(engine, now)
        last = self._probes.get(engine)
        if last is not None and now - last < self.config.heartbeat_interval:
            return ""  # probed lately (or a probe is under way): one per interval at most
        self._probes[engine] = now
        return segments[0].client_id

    def probed(self, engine: str, owner: str, refusal: str | None) -> None:
        """The master's own probe of `engine` (whose segments `owner` mounted): `refusal` None when the
        engine answered as owner's, which disproves the reports made before the probe began, else why
        not: evidence, its segments are suspect."""
        now = self.clock()
        if refusal is None:
            began = self._probes.get(engine, now)
            reports = self._unreachable_reports.get(engine, {})
            for reporter in [c for c, when in reports.items() if when <= began]:
                del reports[reporter]
            for seg in self._segments_of(engine):  # reachable as its owner's: suspect no more
                if seg.client_id == owner:
                    self.space.trust(seg)
            return
        for seg in self._segments_of(engine):
            if seg.client_id == owner and self.space.suspect(seg, now):
                self.counters.suspected_segments += 1

    def judge_unreachable_reports(self) -> None:
        """Reports are confirmed once the node misses heartbeats (O(reported engines))."""
        now = self.clock()
        for engine in list(self._unreachable_reports):
            self._judge_unreachable(engine, now)
        interval = self.config.heartbeat_interval
        for engine in [e for e, when in self._probes.items() if now - when >= interval]:
            del self._probes[engine]  # (past the rate limit: the entry says nothing any more)

    def _judge_unreachable(self, engine: str, now: float) -> None:
        reports = self._unreachable_reports.get(engine, {})
        interval = self.config.heartbeat_interval
        for reporter in [c for c, when in reports.items() if now - when > REPORT_WINDOW * interval]:
            del reports[reporter]
        if not reports:
            self._unreachable_reports.pop(engine, None)
            return
        segments = self._segments_of(engine)
        owners = [self.clients.get(seg.client_id) for seg in segments]
        if not any(c is None or now - c.last_seen > SILENT_INTERVALS * interval for c in owners):
            return  # its node heartbeats: only the master's probe can tell (reports cost nothing)
        for seg in segments:
            if self.space.suspect(seg, now):
                self.counters.suspected_segments += 1

    def _segments_of(self, engine: str) -> list[Segment]:
        return [seg for seg in self.space if seg.engine == engine]
