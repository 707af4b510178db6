"""What each node is told it holds: every committed replica on a node's segment is sent to that node
(on its work channel, with the kills of kvstore.master.fences), so the node can name what it holds to a
master that lost its table (restarted, or a new leader) and that master rebuilds the objects from them.

A hold is sent until the node acknowledges it (AwaitWork's `held_through`: holds are numbered in the
order they are queued). Freeing the replica before that cancels it: a node never learns of a replica
after its kill.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from kvstore.master.model import ObjectMeta, Replica

Hold = tuple[int, int, int, int, int, str, int, int, bool, int]  # kvstore.rpc.messages.HeldReplica's fields


class HoldBook:
    def __init__(self, wake: Callable[[str], None]) -> None:
        self._wake = wake  # wakes the node's parked work poll
        self._unsent: set[str] = set()  # nodes with holds queued since the last send()
        self._seq = 0
        # client -> (region, slot) -> (seq, object, replica), oldest first
        self._queued: dict[str, dict[tuple[int, int], tuple[int, ObjectMeta, Replica]]] = {}
        self.sent = 0

    def hold(self, meta: ObjectMeta, replica: Replica) -> None:
        """The node of `replica` holds it now (the object is committed, or the copy landed)."""
        seg = replica.segment
        self._seq += 1
        queue = self._queued.get(seg.client_id)
        if queue is None:
            queue = self._queued[seg.client_id] = {}
        # What the node is told is built when it is sent (take): the put path only queues.
        queue[(seg.region_id, replica.slot)] = (self._seq, meta, replica)
        self._unsent.add(seg.client_id)

    def send(self) -> None:
        """Wakes the polls of the nodes with holds queued (once per request, not once per hold: the
        master's request handlers call it when they are done)."""
        if self._unsent:
            unsent, self._unsent = self._unsent, set()
            for client_id in unsent:
                self._wake(client_id)

    def cancel(self, client_id: str, region_id: int, slot: int, gen: int) -> None:
        """The replica in (slot, gen) is freed: a hold for it not yet acknowledged is not sent again."""
        queue = self._queued.get(client_id)
        if queue is not None:
            held = queue.get((region_id, slot))
            if held is not None and held[2].gen == gen:
                del queue[(region_id, slot)]

    def take(self, client_id: str, limit: int) -> list[Hold]:
        """At most `limit` holds for the node, oldest first (sent again until acknowledged)."""
        queue = self._queued.get(client_id)
        if not queue:
            return []
        out = [
            (
                seq,
                r.segment.region_id,
                r.offset,
                r.slot,
                r.gen,
                m.key,
                m.size,
                m.checksum,
                m.pinned,
                m.base_replicas,
            )
            for seq, m, r in itertools.islice(queue.values(), limit)
        ]
        self.sent += len(out)
        return out

    def acknowledge(self, client_id: str, through: int) -> None:
        """The node has every hold numbered up to `through`."""
        queue = self._queued.get(client_id)
        while queue:
            first = next(iter(queue))
            if queue[first][0] > through:
                return
            del queue[first]

    def drop_client(self, client_id: str) -> None:
        self._queued.pop(client_id, None)
        self._unsent.discard(client_id)

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
