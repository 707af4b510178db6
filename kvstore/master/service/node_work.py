"""A storage node's one channel of work (AwaitWork): what it reports (kills applied, holds and disk drops
received, copies, disk orders and checksum checks finished) goes to the parts that wait for it, and what
is queued for it (kills, holds, copies, disk drops and orders, checks) goes back in one reply."""

from __future__ import annotations

from collections.abc import Callable

from kvstore.errors import MasterUnavailableError
from kvstore.master.ledger.model import Client
from kvstore.master.planners.disk_tier import DiskTier
from kvstore.master.planners.placement import SegmentSpace
from kvstore.master.planners.replication import Replicator
from kvstore.master.service.corrupt_checks import CorruptChecks
from kvstore.rpc import messages as m


class WorkChannel:
    """Given the parts that queue a node's work and wait for its reports (not the whole state)."""

    def __init__(
        self,
        client: Callable[[str], Client],
        space: SegmentSpace,
        disk: DiskTier,
        replicator: Replicator,
        corrupt_checks: CorruptChecks,
        confirm_corrupt: Callable[[str, int, bool], None],
        plan_demotions: Callable[[], None],
    ) -> None:
        """`client(id)`: the registered node, or NotFoundError; `space`: its segments' kills and holds;
        `confirm_corrupt`: acts on a check's answer (kvstore.master.service.removal); `plan_demotions`: plans
        again once disk orders end."""
        self.client = client
        self.space, self.fences, self.holds = space, space.fences, space.holds
        self.disk = disk
        self.replicator = replicator
        self.corrupt_checks = corrupt_checks
        self.confirm_corrupt = confirm_corrupt
        self.plan_demotions = plan_demotions

    def take_reports(self, r: m.AwaitWork, epoch: int) -> None:
        """Applies what the node reports. A node following a newer leader than this master's `epoch` is
        refused: this master was deposed and may change nothing."""
        if r.epoch > epoch:
            raise MasterUnavailableError(f"this master leads epoch {epoch}; the node follows epoch {r.epoch}")
        if r.registration != self.client(r.client_id).registration:
            # Made under another registration (an older master's numbers, sent by a node whose other
            # thread registered again meanwhile): acknowledging by them would count holds, kills and drops
            # of this master that the node never received. The node starts its reports afresh.
            return
        self.space.acknowledge(r.client_id, r.acked)
        self.holds.acknowledge(r.client_id, r.held_through)
        self.disk.acknowledge_drops(r.client_id, r.dropped_through)
        for task, ok in r.copied:
            self.replicator.complete(r.client_id, task, ok)
        if r.disk_done:
            self.disk.complete(r.client_id, [m.DiskResult(order, ok) for order, ok in r.disk_done])
            self.plan_demotions()
        for check, intact in r.checked:
            self.confirm_corrupt(r.client_id, check, intact)

    def take_work(self, client_id: str, epoch: int) -> m.NodeWork:
        """Everything queued for the node, bounded so that its acknowledgements fit one request."""
        by_region: dict[int, m.FenceOrder] = {}
        for k in self.fences.take(client_id, m.FENCE_BATCH):
            order = by_region.get(k.segment.region_id)
            if order is None:
                order = by_region[k.segment.region_id] = m.FenceOrder(k.segment.region_id, [], [], [], [])
            order.kills.append(k.id)
            order.slots.append(k.slot)
            order.gens.append(k.gen)
            order.buried.append(k.buried)
        return m.NodeWork(
            epoch,
            list(by_region.values()),
            self.holds.take_packed(client_id, m.FENCE_BATCH) or [],  # (encoded in C++ as the wire has it)
            self.replicator.tasks_for(client_id, m.RESULTS_BATCH),
            self.disk.take_drops(client_id, m.FENCE_BATCH),
            self.disk.take(client_id, m.RESULTS_BATCH),
            self.corrupt_checks.take(client_id, m.RESULTS_BATCH),
        )


def has_work(work: m.NodeWork) -> bool:
    return any((work.fences, work.holds, work.copies, work.disk_drops, work.disk_orders, work.checks))
