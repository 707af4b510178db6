"""The master state's tables and the primitives every job on them shares: who is registered, which
replicas a reader is offered, and deleting an object (kvstore.master.service.state puts the jobs together).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kvstore.config.master import MasterConfig
from kvstore.errors import NotFoundError, PermissionDeniedError
from kvstore.master.ledger.changes import ObjectDropped, ReplicaAdded
from kvstore.master.ledger.fences import FenceBook
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import Client, Counters, Replica, Segment
from kvstore.master.ledger.node_polls import NodePolls
from kvstore.master.ledger.objects import MEMORY_ORDER, ObjectMeta, TableOrder
from kvstore.master.ledger.pending import PutsInProgress
from kvstore.master.planners.disk_tier import DiskTier
from kvstore.master.planners.eviction import EvictionPolicy, make_policy
from kvstore.master.planners.placement import SegmentSpace
from kvstore.master.planners.replication import Replicator
from kvstore.master.planners.tiers import TierSpace
from kvstore.master.planners.victims import VictimPlanner
from kvstore.master.service.corrupt_checks import CorruptChecks
from kvstore.master.service.restore import Restore


class StateCore:
    def __init__(self, config: MasterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        polls = NodePolls()  # each node's one work poll: whoever queues work for a node wakes it
        # The one writer of the segment, object, space and fence tables (kvstore.master.ledger.ledger).
        self.ledger = Ledger(FenceBook(clock, polls.wake))
        self.memory_order = TableOrder(self.ledger.objects, MEMORY_ORDER)
        memory_order = make_policy(config.eviction_policy, self.memory_order)
        self.space = SegmentSpace(config.allocation_alignment, clock, self.ledger, polls, memory_order)
        self.policy: EvictionPolicy = self.space.policy  # the memory tier's eviction order
        self.clients: dict[str, Client] = {}
        self._by_node: dict[str, str] = {}  # node identity -> the client registered with it
        # engine -> reporting client -> when it last found that engine unreachable
        # (kvstore.master.service.suspicion)
        self._unreachable_reports: dict[str, dict[str, float]] = {}
        self._probes: dict[str, float] = {}  # engine -> when the master last began to probe it itself
        # Where clients register from -> its clients, in heartbeat order (max_clients_per_host): the
        # connection's peer address (a claimed host id would let a member fill another host's share).
        self._hosts: dict[str, dict[str, None]] = {}
        self._address_of: dict[str, str] = {}  # client -> its key in _hosts
        # registrations that proved the admin secret (kvstore.master.service.roles)
        self.admins: set[str] = set()
        self._admin_nonces: dict[str, str] = {}  # client -> the nonce it was given to prove it over
        self.objects: Mapping[str, ObjectMeta] = self.ledger.objects
        self.ledger.watch(ReplicaAdded, self._hold_added)
        self.replicator = Replicator(config, clock, self.space, self.ledger)
        self.corrupt_checks = CorruptChecks(polls.wake, clock)  # reported corrupt: its node checks first
        self.disk = DiskTier(config, clock, self.space, self.ledger, self.policy)
        # Every tier's space, one interface (kvstore.master.planners.tiers): memory, then disk.
        self.tiers: tuple[TierSpace[Any, Any], ...] = (self.space, self.disk.disk_space)
        self.disk.on_lost = self._delete
        self.victims = VictimPlanner(
            self.ledger.objects,
            self.policy,
            self.memory_order,
            self.disk,
            clock,
            lambda urgent: self.plan_demotions(urgent),
        )
        # Puts started and not ended: expiry checks these every tick, not every object.
        self._pending = PutsInProgress(self.objects)
        self.counters = Counters()
        # What nodes name back after a restart (kvstore.master.service.restore), given what it works on.
        self.restorer = Restore(
            config, clock, self.ledger, self.space, self.disk, self.policy, self.counters, self._delete
        )

    @property
    def segments(self) -> Mapping[int, Segment]:
        return self.space.segments

    def _hold_added(self, records: list[ReplicaAdded]) -> None:
        """A copy that landed is told to its node (kvstore.master.ledger.holds; a put's replicas are told as
        they are placed)."""
        for r in records:
            meta = self.objects[r.key]
            if meta.complete:
                self.space.holds.hold_all(meta, [r.replica])

    def check_client(self, client_id: str) -> None:
        """NotFoundError unless the client is registered (it must register again after a restart)."""
        self._client(client_id)

    def check_admin(self, client_id: str, what: str) -> None:
        """PermissionDeniedError unless the client proved the admin secret (kvstore.master.service.roles)."""
        if client_id not in self.admins or client_id not in self.clients:
            raise PermissionDeniedError(
                f"{what} needs an admin: the caller must hold the admin secret the master has "
                "(KVSTORE_ADMIN_SECRET_FILE for a client, KVSTORE_MASTER_ADMIN_SECRET_FILE for the master)"
            )

    def _client(self, client_id: str) -> Client:
        client = self.clients.get(client_id)
        if client is None:
            raise NotFoundError(f"unknown client {client_id}; register first")
        return client

    def offered(self, meta: ObjectMeta) -> list[Replica]:
        """The replicas a reader is given: those on segments not suspected unreachable."""
        if not self.space.any_suspect():
            return meta.replicas
        return [r for r in meta.replicas if r.segment.usable]

    def exists(self, key: str) -> bool:
        """Stored, and readable: at least one replica is not on a segment suspected unreachable."""
        meta = self.objects.get(key)
        return meta is not None and meta.visible and (bool(self.offered(meta)) or meta.disk is not None)

    def _delete(self, meta: ObjectMeta) -> None:
        # An unfinished put's writer may still be writing; a finished object's readers may hold its
        # locations while their lease lasts. Either way the node fences the allocations off first.
        complete = meta.complete
        writing = not complete
        read_until = meta.lease_until if complete else 0.0
        for r in meta.replicas:
            self.space.free(meta.key, r, hold=writing, read_until=read_until)
        self.disk.drop_record(meta)
        self.policy.on_remove(meta.key)  # (while it is in the table: the policy's order is the table's)
        if meta.alive:  # (the same object still: not dropped meanwhile)
            self.ledger.apply([ObjectDropped(meta.key)])
        self._pending.pop(meta.key)
        self.replicator.forget(meta.key)
        self.disk.forget(meta.key)

    def _delete_bare(self, keys: list[str]) -> None:
        """_delete of objects left with no replica and no disk record (their segment is gone: nothing
        to fence), a batch at a time."""
        # Lost, not removed: what their node names back when it returns is taken
        # (kvstore.master.ledger.tombstones)
        self.space.fences.tombstones.lose(keys, self.clock() + 2 * self.config.client_ttl)
        self.policy.on_remove_many(keys)  # (while they are in the table: the policy's order is the table's)
        self.ledger.drop_objects(keys)
        self._pending.pop_many(keys)
        self.replicator.forget_many(keys)
        self.disk.forget_many(keys)

    @property
    def capacity(self) -> int:
        """Bytes of all mounted segments."""
        return self.space.capacity

    @property
    def used(self) -> int:
        """Bytes allocated in all segments."""
        return self.space.used

    def usage(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0

    def plan_demotions(self, urgent: bool = False) -> None:
        """Gives disk records to the objects eviction would take next (kvstore.master.planners.disk_tier)."""
        self.disk.plan(self.usage(), self.capacity, self.policy.candidates, urgent)
