"""The master's metadata: clients, segments, objects, leases, placement and eviction.

Pure bookkeeping, no I/O: the RPC service calls it from one event loop, tests call it directly with a
fake clock. Data never passes through here; clients move it through the transfer engine. Each job is a
collaborator of its own, given the tables and the other jobs it works with (not this object): the tables
and shared primitives (state_core), clients, their segments and admin roles (membership, roles), suspicion
of unreachable nodes (suspicion), puts, reads (access), removal and eviction (removal), what nodes name
back (restore); this one builds them and runs what spans them (a stall's credit, expiry, the stats):
callers ask each job itself.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from kvstore.config.master import MasterConfig
from kvstore.master.ledger.groups import INCOMPLETE_PUT_TIMEOUTS
from kvstore.master.ledger.model import Client
from kvstore.master.planners.victims import RoomComing
from kvstore.master.service.access import Access
from kvstore.master.service.membership import Membership
from kvstore.master.service.puts import Puts
from kvstore.master.service.removal import Removal
from kvstore.master.service.state_core import StateCore
from kvstore.master.service.suspicion import Suspicion

__all__ = ["MasterState", "RoomComing"]


class MasterState:
    """Builds the jobs, each given what it works with; callers ask each job (`state.puts.put_start`,
    `state.members.register_client`, ...). Its own operations are those that span the jobs: crediting a
    stall, expiry and the stats."""

    def __init__(self, config: MasterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        core = self.core = StateCore(config, clock)
        clients: dict[str, Client] = {}  # the registered ones: Membership's table, suspicion reads it
        self.suspicion = Suspicion(config, clock, core.space, clients, core.counters)
        self.members = Membership(core, clients, self.suspicion)
        self.roles = self.members.roles
        self.removal = Removal(core, self.roles)
        self.puts = Puts(core, self.removal, self.members.client)
        self.access = Access(core)
        core.disk.make_room = functools.partial(self.removal.evict_one, disk_backed_only=True)
        # The tables and planners callers work with (their owners: the ledger, the space, the tiers).
        self.ledger, self.objects, self.space, self.disk = core.ledger, core.objects, core.space, core.disk
        self.policy, self.memory_order, self.tiers = core.policy, core.memory_order, core.tiers
        self.replicator, self.corrupt_checks, self.counters = (
            core.replicator,
            core.corrupt_checks,
            core.counters,
        )
        self._pending = core.pending

    def credit_stall(self, seconds: float) -> None:
        """The master itself did not run for `seconds` (a paused VM, SIGSTOP, swap, one request holding the
        loop): nobody could reach it, so that time counts neither as a client's silence nor against the
        deadlines of puts and copies in progress. Silence is judged by what the master could receive."""
        if seconds <= 0:
            return
        self.counters.stalls += 1
        self.counters.stalled_seconds += seconds
        for client in self.members.clients.values():
            client.last_seen += seconds
        self._pending.credit(seconds)
        self.replicator.credit_stall(seconds)
        self.disk.credit_stall(seconds)

    def expire(self) -> None:
        """Drops silent clients and reclaims abandoned puts."""
        now = self.clock()
        for client in [
            c for c in self.members.clients.values() if now - c.last_seen > self.config.client_ttl
        ]:
            self.counters.dropped_clients += 1
            self.members.drop_client(client.id)
        for meta in self._pending.expired(now):
            self.counters.reclaimed_puts += 1
            self.core.delete(meta)
        # Groups missing a member for a few put timeouts (a writer died, a node was lost) are dropped.
        self.removal.drop_incomplete_groups(
            self.ledger.groups.stale(now - INCOMPLETE_PUT_TIMEOUTS * self.config.put_timeout)
        )
        self.suspicion.judge_unreachable_reports()
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
            "capacity": self.space.capacity,
            "used": self.space.used,
            "usage": self.core.usage(),
            "segments": len(self.space.segments),
            # mounted but still naming back what their node holds: a get of what they hold misses till then
            "segments_restoring": sum(1 for s in self.space.segments.values() if s.restoring is not None),
            "clients": len(self.members.clients),
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
