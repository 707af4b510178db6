"""The nodes' parked work polls (AwaitWork): whoever queues work for a node wakes its poll, which then
answers with all the work queued for it (kills, holds, copies, disk orders)."""

from __future__ import annotations

from collections.abc import Callable

Waiter = Callable[[], object]


class NodePolls:
    def __init__(self) -> None:
        self._parked: dict[str, Waiter] = {}  # client id -> its node's parked poll

    def park(self, client_id: str, waiter: Waiter) -> None:
        """`waiter()` runs when work for this client's node is queued (it replaces an earlier one)."""
        self._parked[client_id] = waiter

    def wake(self, client_id: str) -> None:
        """Answers the node's parked poll now: work is queued for it."""
        waiter = self._parked.pop(client_id, None)
        if waiter is not None:
            waiter()

    def forget(self, client_id: str) -> None:
        self._parked.pop(client_id, None)
