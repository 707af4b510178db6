"""What each node is told it holds: every committed replica on a node's segment is sent to that node
(on the fence channel, kvstore.master.fences), so the node can name what it holds to a master that lost
its table (restarted, or a new leader) and that master rebuilds the objects from the nodes.

A hold is sent until the node acknowledges it (AwaitFences' `held_through`: holds are numbered in the
order they are queued). Freeing the replica before that cancels it: a node never learns of a replica
after its kill.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from kvstore.master.model import ObjectMeta, Replica
from kvstore.rpc.messages import HeldReplica


class HoldBook:
    def __init__(self, wake: Callable[[str], None]) -> None:
        self._wake = wake  # wakes the node's parked fence poll
        self._seq = 0
        self._queued: dict[str, dict[tuple[int, int], HeldReplica]] = {}  # client -> (region, slot) -> hold
        self.sent = 0

    def hold(self, meta: ObjectMeta, replica: Replica) -> None:
        """The node of `replica` holds it now (the object is committed, or the copy landed)."""
        seg = replica.segment
        self._seq += 1
        queue = self._queued.setdefault(seg.client_id, {})
        queue[(seg.region_id, replica.slot)] = HeldReplica(
            self._seq,
            seg.region_id,
            replica.offset,
            replica.slot,
            replica.gen,
            meta.key,
            meta.size,
            meta.checksum,
            meta.pinned,
            meta.base_replicas,
        )
        self._wake(seg.client_id)

    def cancel(self, client_id: str, region_id: int, slot: int, gen: int) -> None:
        """The replica in (slot, gen) is freed: a hold for it not yet acknowledged is not sent again."""
        queue = self._queued.get(client_id)
        if queue is not None:
            held = queue.get((region_id, slot))
            if held is not None and held.gen == gen:
                del queue[(region_id, slot)]

    def pending(self, client_id: str) -> bool:
        return bool(self._queued.get(client_id))

    def take(self, client_id: str, limit: int) -> list[HeldReplica]:
        """At most `limit` holds for the node, oldest first (sent again until acknowledged)."""
        queue = self._queued.get(client_id)
        if not queue:
            return []
        out = list(itertools.islice(queue.values(), limit))
        self.sent += len(out)
        return out

    def acknowledge(self, client_id: str, through: int) -> None:
        """The node has every hold numbered up to `through`."""
        queue = self._queued.get(client_id)
        while queue:
            first = next(iter(queue))
            if queue[first].seq > through:
                return
            del queue[first]

    def drop_client(self, client_id: str) -> None:
        self._queued.pop(client_id, None)

    def drop_region(self, client_id: str, region_id: int) -> None:
        queue = self._queued.get(client_id)
        if queue:
            for where in [w for w in queue if w[0] == region_id]:
                del queue[where]

    def stats(self) -> dict[str, int]:
        return {
            "holds_sent": self.sent,
            "holds_outstanding": sum(len(q) for q in self._queued.values()),
        }
