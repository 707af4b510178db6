"""The master state's tables and the primitives every job on them shares: which replicas a reader is
offered, deleting an object, how full memory is. A collaborator like the jobs (kvstore.master.service.state
puts them together): each job is given the tables and primitives it works with, not this whole object.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import xxhash

from kvstore.config.master import MasterConfig
from kvstore.master.ledger.changes import ObjectDropped, ObjectsLost
from kvstore.master.ledger.fences import FenceBook
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import Counters, Replica
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
    """The ledger and the planners over it (space, eviction orders, replication, the disk tier), the puts
    in progress, the counters, and the primitives the jobs share."""

    def __init__(self, config: MasterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        polls = NodePolls()  # each node's one work poll: whoever queues work for a node wakes it
        # The one writer of the segment, object, space and fence tables (kvstore.master.ledger.ledger).
        self.ledger = Ledger(FenceBook(clock, polls.wake))
        # Each shard's master draws its own placements (it runs under its shard's cluster name,
        # "<cluster>.shard-<i>": kvstore.master.wire.process), reproducible for that name.
        self.ledger.memory.seed(xxhash.xxh3_64_intdigest(config.cluster.encode()))
        self.memory_order = TableOrder(self.ledger.objects, MEMORY_ORDER)
        memory_order = make_policy(config.eviction_policy, self.memory_order)
        self.space = SegmentSpace(config.allocation_alignment, clock, self.ledger, polls, memory_order)
        self.policy: EvictionPolicy = self.space.policy  # the memory tier's eviction order
        self.objects: Mapping[str, ObjectMeta] = self.ledger.objects
        self.replicator = Replicator(config, clock, self.space, self.ledger)
        self.corrupt_checks = CorruptChecks(polls.wake, clock)  # reported corrupt: its node checks first
        self.disk = DiskTier(config, clock, self.space, self.ledger, self.policy)
        # Every tier's space, one interface (kvstore.master.planners.tiers): memory, then disk.
        self.tiers: tuple[TierSpace[Any, Any], ...] = (self.space, self.disk.disk_space)
        self.disk.on_lost = self.delete
        self.victims = VictimPlanner(
            self.ledger.objects,
            self.policy,
            self.memory_order,
            self.disk,
            clock,
            lambda urgent: self.plan_demotions(urgent),
        )
        # Puts started and not ended (kept in the table: dropping an object ends its put): expiry checks
        # these every tick, not every object.
        self.pending = PutsInProgress(self.objects)
        self.counters = Counters()
        # What nodes name back after a restart (kvstore.master.service.restore), given what it works on.
        self.restorer = Restore(
            config, clock, self.ledger, self.space, self.disk, self.policy, self.counters, self.delete
        )

    def offered(self, meta: ObjectMeta) -> list[Replica]:
        """The replicas a reader is given: those on segments not suspected unreachable."""
        if not self.space.any_suspect():
            return meta.replicas
        return [r for r in meta.replicas if r.segment.usable]

    def exists(self, key: str) -> bool:
        """Stored, and readable: at least one replica is not on a segment suspected unreachable."""
        meta = self.objects.get(key)
        return meta is not None and meta.visible and (bool(self.offered(meta)) or meta.disk is not None)

    def delete(self, meta: ObjectMeta) -> None:
        """Drops the object, fencing its replicas off first (its writer or readers may still use them)."""
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
        self.replicator.forget(meta.key)
        self.disk.forget(meta.key)

    def delete_many(self, doomed: list[ObjectMeta]) -> None:
        """delete() of finished objects (each once), a batch in passes: the replicas freed with each node's
        waiting puts checked once (SegmentSpace.free_many), the policy's removal in one step
        (on_remove_many: the ghost cut to its bound once) and the table's drop in one crossing. The same
        end state as delete() one at a time (the records come grouped by kind, each key's in its order)."""
        if len(doomed) == 1:  # (a remove() of one key: delete's calls cost less than the passes' lists)
            self.delete(doomed[0])
            return
        self.space.free_many([(m.key, r, m.lease_until) for m in doomed for r in m.replicas])
        drop_record = self.disk.drop_record
        for meta in doomed:
            drop_record(meta)
        keys = [m.key for m in doomed]
        self.policy.on_remove_many(keys)  # (while they are in the table: the policy's order is the table's)
        self.ledger.drop_objects([m.key for m in doomed if m.alive])
        self.replicator.forget_many(keys)
        self.disk.forget_many(keys)

    def delete_bare(self, keys: list[str]) -> None:
        """delete of objects left with no replica and no disk record (their segment is gone: nothing
        to fence), a batch at a time."""
        # Lost, not removed: what their node names back when it returns is taken
        # (kvstore.master.ledger.tombstones)
        self.ledger.apply([ObjectsLost(keys, self.clock() + 2 * self.config.client_ttl)])
        self.policy.on_remove_many(keys)  # (while they are in the table: the policy's order is the table's)
        self.ledger.drop_objects(keys)
        self.replicator.forget_many(keys)
        self.disk.forget_many(keys)

    def usage(self) -> float:
        """The share of memory allocated (kvstore.master.planners.placement.SegmentSpace keeps the bytes)."""
        space = self.space
        return space.used / space.capacity if space.capacity else 0.0

    def plan_demotions(self, urgent: bool = False) -> None:
        """Gives disk records to the objects eviction would take next (kvstore.master.planners.disk_tier)."""
        self.disk.plan(self.usage(), self.space.capacity, self.policy.candidates, urgent)
