"""A node's membership in each shard of a cluster split over several masters (kvstore.cluster.shards).

The node joins every shard whose master answers at start. A shard whose master cannot be reached then
(down, between leaders past the join's wait, not started yet) is joined later: a thread retries it with
a growing pause until its master answers, so one shard down neither keeps the node from serving the
others nor leaves it out of that shard once it is back. Any other refusal (another shard's master, a bad
secret) stops the node at start, as a one-shard node stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Generic, TypeVar

from kvstore.errors import MasterUnavailableError

log = logging.getLogger("kvstore.node")

FIRST_RETRY_SECONDS = 0.5
LONGEST_RETRY_SECONDS = 10.0

M = TypeVar("M")


class ShardJoins(Generic[M]):
    """`join(i)` enters shard i's membership (a context: left on close); `members()` are the shards
    joined so far, by shard (None where not yet)."""

    def __init__(
        self, shards: int, join: Callable[[int], AbstractContextManager[M]], where: list[str]
    ) -> None:
        """`where[i]`: how shard i's master is found (for the log)."""
        self.shards, self._join, self._where = shards, join, where
        self._members: list[M | None] = [None] * shards
        # entered by start() and then only by the retry thread, closed once that thread has ended
        self._stack = ExitStack()
        self._lock = threading.Lock()  # (members: read while the retry thread joins)
        self._stop = threading.Event()
        self._retry: threading.Thread | None = None

    def start(self, retry: bool = True) -> None:
        """Joins each shard that answers, in shard order; the others are retried on a thread. Without
        `retry` (a cluster of one shard) a master that cannot be reached is raised, as before shards."""
        if not retry:
            for shard in range(self.shards):
                self._members[shard] = self._stack.enter_context(self._join(shard))
            return
        missing = [shard for shard in range(self.shards) if not self._try(shard, first=True)]
        if missing:
            self._retry = threading.Thread(
                target=self._join_later, args=(missing,), name="kvstore-shard-join", daemon=True
            )
            self._retry.start()

    def members(self) -> list[M | None]:
        with self._lock:
            return list(self._members)

    def stop_joining(self) -> None:
        """No shard is joined after this returns (a join under way ends first)."""
        self._stop.set()
        if self._retry is not None:
            self._retry.join()

    def close(self) -> None:
        """Leaves every shard joined (their sessions closed, their files let go)."""
        self.stop_joining()
        self._stack.close()

    def _try(self, shard: int, first: bool = False) -> bool:
        try:
            member = self._stack.enter_context(self._join(shard))
        except MasterUnavailableError as exc:
            if first:
                log.warning(
                    "shard %d of %d (%s) cannot be reached: serving the others, joining it once it answers"
                    " (%s)",
                    shard,
                    self.shards,
                    self._where[shard],
                    exc,
                )
            return False
        with self._lock:
            self._members[shard] = member
        if not first:
            log.warning("joined shard %d of %d (%s)", shard, self.shards, self._where[shard])
        return True

    def _join_later(self, missing: list[int]) -> None:
        pause = FIRST_RETRY_SECONDS
        while missing and not self._stop.wait(pause):
            missing = [shard for shard in missing if not self._try_quietly(shard)]
            pause = min(pause * 2, LONGEST_RETRY_SECONDS)

    def _try_quietly(self, shard: int) -> bool:
        """One more try; any error but an unreachable master is logged and retried too (the node serves
        the other shards: a refusal here must not take them down)."""
        try:
            return self._try(shard)
        except Exception as exc:
            log.error(
                "shard %d of %d (%s) refused this node: %s", shard, self.shards, self._where[shard], exc
            )
            return False
