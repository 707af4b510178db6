"""The master's metadata: clients, segments, objects, leases, placement and eviction.

Pure bookkeeping, no I/O: the RPC service calls it from one event loop, tests call it directly with a
fake clock. Data never passes through here; clients move it through the transfer engine. Each job is a
collaborator of its own, given the tables and the other jobs it works with (not this object): the tables
and shared primitives (state_core), clients and segments (membership), suspicion of unreachable nodes
(suspicion), admin roles (roles), puts, reads (access), removal and eviction (removal), what nodes name
back (restore); this one builds them, names the operations callers ask for, and keeps time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping

from kvstore.config.master import MasterConfig
from kvstore.master.ledger.groups import INCOMPLETE_PUT_TIMEOUTS
from kvstore.master.ledger.model import Client, Segment
from kvstore.master.planners.victims import RoomComing
from kvstore.master.service.access import Access
from kvstore.master.service.membership import Membership, registered
from kvstore.master.service.puts import Puts
from kvstore.master.service.removal import Removal
from kvstore.master.service.roles import Roles
from kvstore.master.service.state_core import StateCore
from kvstore.master.service.suspicion import Suspicion

__all__ = ["MasterState", "RoomComing"]


class MasterState:
    """Builds the jobs, each given what it works with, and names their operations for callers."""

    def __init__(self, config: MasterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        core = self.core = StateCore(config, clock)
        clients: dict[str, Client] = {}
        self.clients: Mapping[str, Client] = clients
        self.roles = Roles(clients, functools.partial(registered, clients))
        self.suspicion = Suspicion(config, clock, core.space, clients, core.counters)
        self.members = Membership(core, clients, self.roles, self.suspicion)
        self.removal = Removal(core, self.roles)
        self.puts = Puts(core, self.removal, self.members.client)
        self.access = Access(core)
        core.disk.make_room = functools.partial(self.removal.evict_one, disk_backed_only=True)
        # The tables and planners callers work with (their owners: the ledger, the space, the tiers).
        self.ledger, self.objects, self.space, self.disk = core.ledger, core.objects, core.space, core.disk
        self.fences, self.holds, self.polls = core.space.fences, core.space.holds, core.space.polls
        self.policy, self.memory_order, self.tiers = core.policy, core.memory_order, core.tiers
        self.replicator, self.corrupt_checks, self.counters = (
            core.replicator,
            core.corrupt_checks,
            core.counters,
        )
        self._pending = core.pending
        self._name_operations()

    def _name_operations(self) -> None:
        """The operations callers (the handlers, the server, benches, tests) ask the state for, each its
        owner's own method."""
        members, puts, access, removal, roles = self.members, self.puts, self.access, self.removal, self.roles
        self.register_client, self.heartbeat, self.drop_client = (
            members.register_client,
            members.heartbeat,
            members.drop_client,
        )
        self.check_client, self.check_token, self.node_holder = (
            members.check_client,
            members.check_token,
            members.node_holder,
        )
        self.mount_segment, self.unmount_segment = members.mount_segment, members.unmount_segment
        self.restore_segment, self.restore_disk = members.restore_segment, members.restore_disk
        self.start_puts, self.put_start, self.put_end = puts.start_puts, puts.put_start, puts.put_end
        self.put_end_many, self.commit_puts, self.put_revoke = (
            puts.put_end_many,
            puts.commit_puts,
            puts.put_revoke,
        )
        self.get_replicas, self.locate_many, self.touch = (
            access.get_replicas,
            access.locate_many,
            access.touch,
        )
        self.match_prefix, self.change_replica = access.match_prefix, access.change_replica
        self.exists_many, self.exists, self.offered = access.exists_many, self.core.exists, self.core.offered
        self.remove, self.remove_all, self.drop_incomplete_groups = (
            removal.remove,
            removal.remove_all,
            removal.drop_incomplete_groups,
        )
        self.report_corrupt, self.confirm_corrupt = removal.report_corrupt, removal.confirm_corrupt
        self.evict_to_watermark = removal.evict_to_watermark
        self.report_unreachable, self.probed = self.suspicion.report_unreachable, self.suspicion.probed
        self.judge_unreachable_reports = self.suspicion.judge_unreachable_reports
        self.admin_challenge, self.admin_prove, self.check_admin = (
            roles.admin_challenge,
            roles.admin_prove,
            roles.check_admin,
        )
        self.plan_demotions, self.usage = self.core.plan_demotions, self.core.usage
        self.plan_replication = self.replicator.plan

    @property
    def segments(self) -> Mapping[int, Segment]:
        return self.space.segments

    @property
    def capacity(self) -> int:
        """Bytes of all mounted segments."""
        return self.space.capacity

    @property
    def used(self) -> int:
        """Bytes allocated in all segments."""
        return self.space.used

    def credit_stall(self, seconds: float) -> None:
        """The master itself did not run for `seconds` (a paused VM, SIGSTOP, swap, one request holding the
        loop): nobody could reach it, so that time counts neither as a client's silence nor against the
        deadlines of puts and copies in progress. Silence is judged by what the master could receive."""
        if seconds <= 0:
            return
        self.counters.stalls += 1
        self.counters.stalled_seconds += seconds
        for client in self.clients.values():
            client.last_seen += seconds
        self._pending.credit(seconds)
        self.replicator.credit_stall(seconds)
        self.disk.credit_stall(seconds)

    def expire(self) -> None:
        """Drops silent clients and reclaims abandoned puts."""
        now = self.clock()
        for client in [c for c in self.clients.values() if now - c.last_seen > self.config.client_ttl]:
            self.counters.dropped_clients += 1
            self.drop_client(client.id)
        for meta in self._pending.expired(now):
            self.counters.reclaimed_puts += 1
            self.core.delete(meta)
        # Groups missing a member for a few put timeouts (a writer died, a node was lost) are dropped.
        self.drop_incomplete_groups(
            self.ledger.groups.stale(now - INCOMPLETE_PUT_TIMEOUTS * self.config.put_timeout)
        )
        self.judge_unreachable_reports()
        self.corrupt_checks.expire()
        self.replicator.expire()
        self.disk.expire()
        self.ledger.lapse_fences()

    def stats(self) -> dict[str, float | int]:
        return {
            "objects": len(self.objects) - len(self._pending),
            "pending_puts": len(self._pending),
            "groups_incomplete": self.ledger.groups.incomplete(),
            "bytes": self.ledger.stored_bytes,
            "capacity": self.capacity,
            "used": self.used,
            "usage": self.usage(),
            "segments": len(self.segments),
            # mounted but still naming back what their node holds: a get of what they hold misses till then
            "segments_restoring": sum(1 for s in self.segments.values() if s.restoring is not None),
            "clients": len(self.clients),
            "replica_copies": self.replicator.copies_done,
            "replica_copy_failures": self.replicator.copies_failed,
            "replicas_dropped": self.replicator.dropped,
            "copy_tasks": len(self.replicator.tasks),
            "corrupt_checks": self.corrupt_checks.pending(),
            "corrupt_reports_refuted": self.corrupt_checks.refuted,
            **self.space.fences.stats(),
            **self.space.holds.stats(),
            **self.disk.stats(),
            **vars(self.counters),
        }
