"""Replies that wait until nodes have acknowledged work up to a mark: a put is acknowledged once the
nodes of its replicas have recorded that they hold it (kvstore.master.ledger.holds), a removal once they have
fenced its allocations off and forgotten it (kvstore.master.ledger.fences). What a node has acknowledged
survives a master that dies right after the reply: the next master rebuilds from what the nodes name.

Work for a node is numbered in the order it is queued; a mark is reached once nothing numbered at or
below it is outstanding for that node (acknowledged, cancelled, or the node is gone).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Waiter = Callable[[], object]


PRUNE_AT = 64  # waiters queued for one node before those given up on are dropped


class AckWaiters:
    def __init__(self, lowest_outstanding: Callable[[str], int | None], clock: Callable[[], float]) -> None:
        """`lowest_outstanding(client)`: the lowest number not yet acknowledged by that client's node
        (None: nothing is outstanding)."""
        self._lowest = lowest_outstanding
        self._clock = clock
        # by client: (mark, [waits left], waiter, until) -- a node that never acknowledges (stuck, or
        # hostile) must not grow this: entries past `until` (their reply went anyway) are dropped
        self._waiting: dict[str, list[tuple[int, list[int], Waiter, float]]] = {}

    def reached(self, client_id: str, mark: int) -> bool:
        lowest = self._lowest(client_id)
        return lowest is None or lowest > mark

    def wait(self, marks: dict[str, int], waiter: Waiter, seconds: float) -> bool:
        """False when every node reached its mark already; else `waiter()` runs once all have (once),
        unless `seconds` pass first (the caller goes on without it then)."""
        left = [(c, mark) for c, mark in marks.items() if not self.reached(c, mark)]
        if not left:
            return False
        now = self._clock()
        count = [len(left)]  # shared by this waiter's entries: it runs when the last one is reached
        for client_id, mark in left:
            waiting = self._waiting.setdefault(client_id, [])
            if len(waiting) >= PRUNE_AT:
                waiting[:] = [w for w in waiting if w[3] > now]
            waiting.append((mark, count, waiter, now + seconds))
        return True

    def check(self, client_id: str) -> None:
        """The node acknowledged (or lost) work: runs the waiters whose marks it has now reached."""
        waiting = self._waiting.get(client_id)
        if not waiting:
            return
        still = []
        for entry in waiting:
            mark, count, waiter, _ = entry
            if not self.reached(client_id, mark):
                still.append(entry)
                continue
            count[0] -= 1
            if count[0] == 0:
                waiter()
        if still:
            self._waiting[client_id] = still
        else:
            del self._waiting[client_id]

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiting.values())


def wait_all(waits: Sequence[Callable[[Callable[[], None]], bool]], waiter: Waiter) -> bool:
    """Each of `waits` (a `when_...(marks, ·, seconds)` bound but for its waiter) registered at once:
    False when none has anything to wait for; else `waiter()` runs once every one that waited is reached
    (each within its own bound)."""
    left = [len(waits)]

    def one() -> None:
        left[0] -= 1
        if left[0] == 0:
            waiter()

    waited = [wait(one) for wait in waits]
    if not any(waited):
        return False
    for w in waited:
        if not w:
            one()
    return True
