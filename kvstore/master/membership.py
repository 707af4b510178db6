"""Clients and their segments: registration, heartbeats, mounting (and what a remounted segment or disk
names back), suspicion of unreachable nodes, and dropping a client with everything it held."""

from __future__ import annotations

import hmac

from kvstore.errors import NotFoundError, PermissionDeniedError
from kvstore.master import restore
from kvstore.master.model import Client, Segment
from kvstore.master.state_core import StateCore

DROP_CHUNK = 16384  # objects of a lost segment dropped per table crossing
REPORT_WINDOW = 2  # heartbeat intervals a client's report of an unreachable node counts for


class Membership(StateCore):
    def register_client(self, client_id: str, host_id: str, node_id: str = "", token: str = "") -> None:
        """Registers a client (again). A storage node that registers with the identity of an older
        registration is that node restarted: the old one is dropped at once (its process is gone), so
        what the node offers back (disk records) is taken, not deleted when the old TTL runs out.
        `token`: the process's own secret, chosen by it; a registration (again) of a known client with
        another one is refused, so no process can take over another's name."""
        client = self.clients.get(client_id)
        if client is not None:
            self.check_token(client_id, token)
            client.last_seen = self.clock()
            return
        old = self._by_node.get(node_id) if node_id else None
        if old is not None and old != client_id:
            self.counters.superseded_clients += 1
            self.drop_client(old)
        self.clients[client_id] = Client(client_id, host_id, self.clock(), node_id=node_id, token=token)
        if node_id:
            self._by_node[node_id] = client_id

    def heartbeat(self, client_id: str) -> bool:
        """False when the client is unknown (dropped): it must register and mount again. A heartbeat sent
        well after a client reported this client's segments unreachable proves them alive again."""
        client = self.clients.get(client_id)
        if client is None:
            return False
        now = client.last_seen = self.clock()
        interval = self.config.heartbeat_interval
        for seg_id in client.segments:
            seg = self.space.segments.get(seg_id)
            reports = self._unreachable_reports.get(seg.engine) if seg is not None else None
            if reports:  # what was found well before this heartbeat is disproved by it
                for reporter in [c for c, when in reports.items() if now - when >= interval]:
                    del reports[reporter]
            if (
                seg is not None
                and not seg.usable
                and now - seg.suspect_since >= self.config.heartbeat_interval
            ):
                self.space.trust(seg)
        return True

    def check_token(self, client_id: str, token: str) -> None:
        """PermissionDeniedError when the client is registered with another token (a request in its name
        from another process); an unknown client passes (what it asked decides: most need registration)."""
        client = self.clients.get(client_id)
        if client is not None and not hmac.compare_digest(client.token.encode(), token.encode()):
            raise PermissionDeniedError(f"client {client_id!r} is registered by another process")

    def report_unreachable(self, engine: str, reporter: str = "") -> None:
        """A client (`reporter`) failed to reach this node. One client's word is not enough (it may be cut
        off alone, or lie): the node's segments become suspect — not placed on, their replicas not offered
        while another exists — once a second client found the same within REPORT_WINDOW heartbeats, or
        once the node itself missed a heartbeat (judged again by expire()); until the node heartbeats
        again. The reporter's own reads go to other replicas first meanwhile (kvstore.client.store).
        An engine with no segment here holds no replica a client was handed: its report is dropped (nor
        does a client fill the master with reports of made-up engines)."""
        if not any(seg.engine == engine for seg in self.space):
            return
        now = self.clock()
        self._unreachable_reports.setdefault(engine, {})[reporter] = now
        self._judge_unreachable(engine, now)

    def _judge_unreachable(self, engine: str, now: float) -> None:
        reports = self._unreachable_reports.get(engine, {})
        interval = self.config.heartbeat_interval
        for reporter in [c for c, when in reports.items() if now - when > REPORT_WINDOW * interval]:
            del reports[reporter]
        if not reports:
            self._unreachable_reports.pop(engine, None)
            return
        segments = [seg for seg in self.space if seg.engine == engine]
        owners = [self.clients.get(seg.client_id) for seg in segments]
        silent = any(c is None or now - c.last_seen > interval for c in owners)
        if len(reports) < 2 and not silent:
            return
        for seg in segments:
            if self.space.suspect(seg, now):
                self.counters.suspected_segments += 1

    def judge_unreachable_reports(self) -> None:
        """Reports of one client are confirmed once the node misses a heartbeat (O(reported engines))."""
        now = self.clock()
        for engine in list(self._unreachable_reports):
            self._judge_unreachable(engine, now)

    def mount_segment(
        self,
        client_id: str,
        engine: str,
        region_id: int,
        size: int,
        host_id: str,
        fence_slots: int = 1 << 20,
        restoring: bool = False,
    ) -> int:
        client = self._client(client_id)
        seg = self.space.mount(client_id, engine, region_id, size, host_id, fence_slots, restoring)
        client.segments.add(seg.id)
        return seg.id

    def restore_segment(
        self,
        client_id: str,
        segment_id: int,
        records: list[tuple[int, int, int, str, int, int, bool, int]],
        last: bool,
    ) -> list[int]:
        """kvstore.master.restore.restore_segment: the replicas a node names back; returns the refused
        slots."""
        seg = self.segments.get(segment_id)
        if seg is None or seg.client_id != client_id:
            raise NotFoundError(f"client {client_id} has no segment {segment_id}")
        return restore.restore_segment(self, seg, records, last)

    def unmount_segment(self, client_id: str, segment_id: int) -> None:
        seg = self.segments.get(segment_id)
        if seg is None or seg.client_id != client_id:
            raise NotFoundError(f"client {client_id} has no segment {segment_id}")
        self._drop_segment(seg)

    def restore_disk(
        self, client_id: str, records: list[tuple[int, str, int, int, int]], last: bool = True
    ) -> int:
        """kvstore.master.restore.restore_disk: the records a restarted node's disk offers back; returns
        how many were taken."""
        self._client(client_id)
        seg = next((s for s in self.disk.segments.values() if s.client_id == client_id), None)
        if seg is None:
            raise NotFoundError(f"client {client_id} has no disk mounted")
        taken = restore.restore_disk(self, seg, records)
        if last:
            self.disk.disk_space.end_restore(seg)
        return taken

    def drop_client(self, client_id: str) -> None:
        client = self.clients.pop(client_id, None)
        if client is None:
            return
        if client.node_id and self._by_node.get(client.node_id) == client_id:
            del self._by_node[client.node_id]
        for seg_id in list(client.segments):
            seg = self.segments.get(seg_id)
            if seg is not None:
                self._drop_segment(seg)
        for meta in self._pending.by(client_id):
            self._delete(meta)
        self._pending.forget(client_id)
        self.disk.drop_client(client_id)
        self.space.holds.drop_client(client_id)
        self.space.polls.forget(client_id)

    def _drop_segment(self, seg: Segment) -> None:
        """Every replica on the segment disappears; objects left without a replica disappear too."""
        self.replicator.drop_segment(seg)
        self.restored_order.pop(seg.id, None)
        keys = self.space.unmount(seg)
        for at in range(0, len(keys), DROP_CHUNK):
            bare, disk_only = self.ledger.drop_copies_on(seg, keys[at : at + DROP_CHUNK])
            self._delete_bare(bare)
            self.policy.on_remove_many(disk_only)  # on disk only now
        client = self.clients.get(seg.client_id)
        if client:
            client.segments.discard(seg.id)
