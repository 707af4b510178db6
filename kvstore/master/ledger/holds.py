"""What each node is told it holds: every committed replica on a node's segment is sent to that node
(on its work channel, with the kills of kvstore.master.ledger.fences), so the node can name what it holds to a
master that lost its table (restarted, or a new leader) and that master rebuilds the objects from them.

A put's replicas are told to their nodes as soon as they are placed, while the client writes the
bytes: a node names a replica back only if its bytes match the object's checksum, so one whose put never
finished is a miss, and one whose bytes all landed is the key's value whether or not its end was heard.
The put's end is acknowledged once its nodes acknowledged its holds (`when_held`): usually at once, as
they did while the bytes moved. So no master that dies after acknowledging a put takes the object with
it. Replicas copied later are told once they landed.

A hold is sent until the node acknowledges it (AwaitWork's `held_through`: holds are numbered in the
order they are queued). Freeing the replica before that cancels it: a node never learns of a replica
after its kill.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable

from kvstore.master.ledger.model import Replica
from kvstore.master.ledger.node_acks import AckWaiters, Waiter
from kvstore.master.ledger.objects import NewObject, ObjectMeta

Hold = tuple[int, int, int, int, int, str, int, int, bool, int, int]  # kvstore.rpc.messages.HeldReplica's
_Named = tuple[int, int, int, str, int, int, bool, int]
NamedBack = _Named | tuple[int, int, int, str, int, int, bool, int, int]
"""A replica a node names back (kvstore.rpc.messages.RestoreRecord's fields: a hold less its seq and region;
the trailing target is absent from a node of the previous version)."""


class HoldBook:
    def __init__(self, wake: Callable[[str], None], clock: Callable[[], float]) -> None:
        self._wake = wake  # wakes the node's parked work poll (a dictionary miss when none is parked)
        self._seq = 0
        # client -> (region, slot) -> (seq, object, replica), oldest first. OrderedDicts: a plain dict
        # emptied from the front finds its first entry by scanning the deleted ones before it (0.74 against
        # 0.58 us a hold acknowledged, 1,000 holds a batch).
        self._queued: dict[
            str, OrderedDict[tuple[int, int], tuple[int, ObjectMeta | NewObject, Replica]]
        ] = {}
        self._acks = AckWaiters(self._lowest, clock)
        self.sent = 0

    def hold_all(self, meta: ObjectMeta | NewObject, replicas: list[Replica]) -> int:
        """The nodes of `replicas` hold them now (a put placed them, or a copy landed); returns the
        number of the last hold: a node that acknowledged it has all of them (when_held)."""
        queued = self._queued
        for replica in replicas:
            seg = replica.segment
            self._seq += 1
            queue = queued.get(seg.client_id)
            if queue is None:
                queue = queued[seg.client_id] = OrderedDict()
            # What the node is told is built when it is sent (take): the put path only queues. The queue
            # stays in the order of the numbers (a slot held again goes to the end): see _lowest.
            where = (seg.region_id, replica.slot)
            queue.pop(where, None)
            queue[where] = (self._seq, meta, replica)
            # Its reply is built once the request that queued this is done (Master.run_ready), as for
            # kills.
            self._wake(seg.client_id)
        return self._seq

    def hold_many(self, news: list[NewObject]) -> None:
        """hold_all of each new object's replicas, setting its hold_seq; each node is woken once."""
        queued, seq, nodes = self._queued, self._seq, set()
        for new in news:
            for replica in new.replicas:
                seg = replica.segment
                seq += 1
                queue = queued.get(seg.client_id)
                if queue is None:
                    queue = queued[seg.client_id] = OrderedDict()
                nodes.add(seg.client_id)
                where = (seg.region_id, replica.slot)
                queue.pop(where, None)  # (see hold_all)
                queue[where] = (seq, new, replica)
            new.hold_seq = seq
        self._seq = seq
        for node in nodes:
            self._wake(node)

    def when_held(self, marks: dict[str, int], waiter: Waiter, seconds: float) -> bool:
        """`marks`: per node, the number of a hold (hold_all's). False when each node acknowledged every
        hold numbered up to its mark; else `waiter()` runs once they have (or those holds were
        cancelled, or the nodes are gone) within `seconds`."""
        return self._acks.wait(marks, waiter, seconds)

    def _lowest(self, client_id: str) -> int | None:
        queue = self._queued.get(client_id)
        return next(iter(queue.values()))[0] if queue else None

    def cancel(self, client_id: str, region_id: int, slot: int, gen: int) -> None:
        """The replica in (slot, gen) is freed: a hold for it not yet acknowledged is not sent again."""
        queue = self._queued.get(client_id)
        if queue is not None:
            held = queue.get((region_id, slot))
            if held is not None and held[2].gen == gen:
                del queue[(region_id, slot)]
                self._acks.check(client_id)

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
                m.target_replicas,  # (a user's count outlives the master: the next one restores it pinned)
            )
            for seq, m, r in itertools.islice(queue.values(), limit)
        ]
        self.sent += len(out)
        return out

    def acknowledge(self, client_id: str, through: int) -> None:
        """The node has every hold numbered up to `through`."""
        queue = self._queued.get(client_id)
        if queue:
            pop = queue.popitem  # from the front, in C: 0.10 against 0.26 us a hold by taking the first
            while queue:
                where, held = pop(last=False)
                if held[0] > through:
                    queue[where] = held
                    queue.move_to_end(where, last=False)
                    break
        self._acks.check(client_id)

    def drop_client(self, client_id: str) -> None:
        self._queued.pop(client_id, None)
        self._acks.check(client_id)

    def drop_region(self, client_id: str, region_id: int) -> None:
        queue = self._queued.get(client_id)
        if queue:
            for where in [w for w in queue if w[0] == region_id]:
                del queue[where]
            self._acks.check(client_id)

    def stats(self) -> dict[str, int]:
        return {
            "holds_sent": self.sent,
            "holds_outstanding": sum(len(q) for q in self._queued.values()),
            "puts_awaiting_holds": self._acks.waiting(),
        }
