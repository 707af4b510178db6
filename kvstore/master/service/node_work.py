"""A storage node's one channel of work (AwaitWork): what it reports (kills applied, holds and disk drops
received, copies, disk orders and checksum checks finished) goes to the parts that wait for it, and what
is queued for it (kills, holds, copies, disk drops and orders, checks) goes back in one reply."""

from __future__ import annotations

from kvstore.errors import MasterUnavailableError
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m


def take_reports(state: MasterState, r: m.AwaitWork, epoch: int) -> None:
    """Applies what the node reports. A node following a newer leader than this master's `epoch` is
    refused: this master was deposed and may change nothing."""
    if r.epoch > epoch:
        raise MasterUnavailableError(f"this master leads epoch {epoch}; the node follows epoch {r.epoch}")
    state.check_client(r.client_id)
    if r.registration != state.clients[r.client_id].registration:
        # Made under another registration (an older master's numbers, sent by a node whose other
        # thread registered again meanwhile): acknowledging by them would count holds, kills and drops
        # of this master that the node never received. The node starts its reports afresh.
        return
    space = state.space
    space.acknowledge(r.client_id, r.acked)
    space.holds.acknowledge(r.client_id, r.held_through)
    state.disk.acknowledge_drops(r.client_id, r.dropped_through)
    for task, ok in r.copied:
        state.replicator.complete(r.client_id, task, ok)
    if r.disk_done:
        state.disk.complete(r.client_id, [m.DiskResult(order, ok) for order, ok in r.disk_done])
        state.plan_demotions()
    for check, intact in r.checked:
        state.confirm_corrupt(r.client_id, check, intact)


def take_work(state: MasterState, client_id: str, epoch: int) -> m.NodeWork:
    """Everything queued for the node, bounded so that its acknowledgements fit one request."""
    space, disk = state.space, state.disk
    by_region: dict[int, m.FenceOrder] = {}
    for k in space.fences.take(client_id, m.FENCE_BATCH):
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
        space.holds.take(client_id, m.FENCE_BATCH),
        state.replicator.tasks_for(client_id, m.RESULTS_BATCH),
        disk.take_drops(client_id, m.FENCE_BATCH),
        disk.take(client_id, m.RESULTS_BATCH),
        state.corrupt_checks.take(client_id, m.RESULTS_BATCH),
    )


def has_work(work: m.NodeWork) -> bool:
    return any((work.fences, work.holds, work.copies, work.disk_drops, work.disk_orders, work.checks))
