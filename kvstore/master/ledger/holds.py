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
order they are queued; a node acknowledges at most the highest number it was sent). Freeing the replica
before that cancels it: a node never learns of a replica after its kill. A replica held again (a count
set) keeps its earlier hold and number, so a put waiting on that number is answered only once the node
received one of them: the same hold when not sent yet, else a new one sent after it.

The book is C++ (csrc/meta/hold_book, kvstore._meta.HoldBook) over the object table: a hold names its object's
row and its copy, and what the node is told is read from the row when it is sent and encoded there as the
wire carries it (take_packed: no Python object per hold). A hold whose object or copy is gone by then is
dropped, never sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgpack

from kvstore._meta import HoldBook as _Book
from kvstore.master.ledger.model import Replica, Segment
from kvstore.master.ledger.node_acks import AckWaiters, Waiter
from kvstore.master.ledger.objects import ObjectMeta, Objects
from kvstore.rpc.framing import Packed

Hold = tuple[int, int, int, int, int, str, int, int, bool, int, int]  # kvstore.rpc.messages.HeldReplica's
_Named = tuple[int, int, int, str, int, int, bool, int]
NamedBack = _Named | tuple[int, int, int, str, int, int, bool, int, int]
"""A replica a node names back (kvstore.rpc.messages.RestoreRecord's fields: a hold less its seq and region;
the trailing target is absent from a node of the previous version)."""


class HoldBook:
    def __init__(self, wake: Callable[[str], None], clock: Callable[[], float], objects: Objects) -> None:
        """`objects`: the table the holds name rows of (and every segment ever mounted, by id)."""
        self._wake = wake  # wakes the node's parked work poll (a dictionary miss when none is parked)
        self._book = _Book(objects.table)
        self._segments = objects.segments
        self._nodes: dict[str, int] = {}  # client id -> the book's number for it (never reused)
        self._names: list[str] = []
        self._acks = AckWaiters(self._lowest, clock)

    @property
    def sent(self) -> int:
        """Holds sent so far (a hold sent again until acknowledged counts each time)."""
        return self._book.sent

    def _node(self, client_id: str) -> int:
        number = self._nodes.get(client_id)
        if number is None:
            number = self._nodes[client_id] = len(self._names)
            self._names.append(client_id)
        return number

    def _add_segment(self, segment_id: int) -> None:
        seg = self._segments[segment_id]
        self._book.add_segment(seg.id, self._node(seg.client_id), seg.region_id)

    def hold_all(self, meta: ObjectMeta, replicas: list[Replica]) -> int:
        """The nodes of `replicas` hold them now (a copy landed, or a count was set); returns the highest
        number of these holds (0: none): a node that acknowledged it has all of them (when_held)."""
        book, seq = self._book, 0
        for r in replicas:
            seg: Segment = r.segment
            held = book.hold(
                self._node(seg.client_id), meta.ref, seg.id, seg.region_id, r.offset, r.slot, r.gen
            )
            seq = max(seq, held)  # (a replica held again and not sent yet keeps its earlier number)
            # Its reply is built once the request that queued this is done (Master.run_ready), as for
            # kills.
            self._wake(seg.client_id)
        return seq

    def hold_rows(self, refs: Sequence[int]) -> None:
        """hold_all of every replica of each object of `refs` (table references: the put path's rows,
        recorded already), setting each row's hold_seq; each node is woken once. One crossing, no Python
        object per key. KeyError (nothing held) for a reference to an object that is gone."""
        book = self._book
        nodes, unknown = book.hold_rows(refs)
        while unknown:  # a segment's first hold: the book learns where it is, and holds them all then
            self._add_segment(unknown)
            nodes, unknown = book.hold_rows(refs)
        names = self._names
        for node in nodes:
            self._wake(names[node])

    def when_held(self, marks: dict[str, int], waiter: Waiter, seconds: float) -> bool:
        """`marks`: per node, the number of a hold (hold_all's). False when each node acknowledged every
        hold numbered up to its mark; else `waiter()` runs once they have (or those holds were
        cancelled, or the nodes are gone) within `seconds`."""
        return self._acks.wait(marks, waiter, seconds)

    def _lowest(self, client_id: str) -> int | None:
        node = self._nodes.get(client_id)
        return (self._book.lowest(node) or None) if node is not None else None

    def cancel(self, client_id: str, region_id: int, slot: int, gen: int) -> None:
        """The replica in (slot, gen) is freed: a hold for it not yet acknowledged is not sent again."""
        node = self._nodes.get(client_id)
        if node is not None and self._book.cancel(node, region_id, slot, gen):
            self._acks.check(client_id)

    def cancel_many(self, copies: Sequence[tuple[str, int, int, int]]) -> None:
        """cancel() of each (client id, region, slot, generation); the puts waiting on a node are checked
        once for the batch, after its last cancel (a check per copy walked every waiting put each time)."""
        nodes, book = self._nodes, self._book
        cancelled: dict[str, None] = {}  # (in the order of their first cancel)
        for client_id, region_id, slot, gen in copies:
            node = nodes.get(client_id)
            if node is not None and book.cancel(node, region_id, slot, gen):
                cancelled[client_id] = None
        for client_id in cancelled:
            self._acks.check(client_id)

    def take_packed(self, client_id: str, limit: int) -> Packed | None:
        """At most `limit` holds for the node, oldest first (sent again until acknowledged), as the wire
        carries NodeWork.holds (msgpack, kvstore.rpc.messages.HeldReplica's fields); None when none."""
        node = self._nodes.get(client_id)
        if node is None:
            return None
        encoded, count, dropped = self._book.take(node, limit)
        if dropped:  # (gone before they were sent: as if cancelled)
            self._acks.check(client_id)
        return Packed(encoded) if count else None

    def take(self, client_id: str, limit: int) -> list[Hold]:
        """take_packed's holds as tuples (for in-process readers: tests, the memory bench)."""
        packed = self.take_packed(client_id, limit)
        return [] if packed is None else [tuple(h) for h in msgpack.unpackb(packed)]

    def acknowledge(self, client_id: str, through: int) -> None:
        """The node has every hold numbered up to `through` (taken as at most the highest number it was
        sent: a node cannot acknowledge a hold it never received)."""
        node = self._nodes.get(client_id)
        if node is not None:
            self._book.acknowledge(node, through)
        self._acks.check(client_id)

    def drop_client(self, client_id: str) -> None:
        node = self._nodes.get(client_id)
        if node is not None:
            self._book.drop_node(node)
        self._acks.check(client_id)

    def drop_region(self, client_id: str, region_id: int) -> None:
        node = self._nodes.get(client_id)
        if node is not None:
            self._book.drop_region(node, region_id)
            self._acks.check(client_id)

    def stats(self) -> dict[str, int]:
        return {
            "holds_sent": self._book.sent,
            "holds_outstanding": self._book.outstanding,
            "puts_awaiting_holds": self._acks.waiting(),
        }
