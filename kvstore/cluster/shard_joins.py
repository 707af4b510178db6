"""A process's membership in each shard of a cluster split over several masters (kvstore.cluster.shards):
a storage node's (kvstore.node.process) and a client's (kvstore.client.sharded).

The process joins every shard whose master answers at start. A shard whose master cannot be reached then
(down, between leaders past the join's wait, not started yet) is joined later: a thread retries it with
a growing pause until its master answers, so one shard down neither keeps the process from serving the
others nor leaves it out of that shard once it is back. Any other refusal (another shard's master, a bad
secret) stops the process at start, as a one-shard process stops.

Each try first asks the shard's master for a hello within HELLO_SECONDS (at most the RPC timeout): a
master that accepts connections but never answers (stopped, hung) costs a try seconds, not the RPC
timeout, at start and on every retry. A clean stop does not wait for a join under way: the thread that
joins leaves that shard itself once in.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Generic, TypeVar

from kvstore.cluster.leader import locator
from kvstore.cluster.master_client import MasterClient
from kvstore.config import StoreConfig
from kvstore.errors import MasterUnavailableError

log = logging.getLogger("kvstore.cluster")

FIRST_RETRY_SECONDS = 0.5
# A shard back is joined at most this long after it answers (its keys miss meanwhile); a try that fails
# is a refused connection or one hello, cheap enough to make every 2 s for as long as a shard is down.
LONGEST_RETRY_SECONDS = 2.0
HELLO_SECONDS = 2.0  # a try's wait for the shard's master to say hello (the RPC timeout if shorter)

M = TypeVar("M")


class ShardJoins(Generic[M]):
    """`join(i)` enters shard i's membership (a context: left on close); `members()` are the shards
    joined so far, by shard (None where not yet)."""

    def __init__(
        self,
        shards: int,
        join: Callable[[int], AbstractContextManager[M]],
        where: list[str],
        reach: Callable[[int], None] | None = None,
        leave: Callable[[M], None] | None = None,
    ) -> None:
        """`where[i]`: how shard i's master is found (for the log). `reach(i)`: raises
        MasterUnavailableError unless shard i's master answers soon (asked before each try to join it
        where retries are on). `leave(member)`: what a clean stop does with a shard joined (the retry
        thread does it to one it joins after the stop)."""
        self.shards, self._join, self._where = shards, join, where
        self._reach, self._leave = reach, leave
        self._members: list[M | None] = [None] * shards
        # Each shard's context, once joined; none is added after the stop (under the lock), so close()
        # closes it without the retry thread, which may still be in a join it then leaves itself.
        self._stack = ExitStack()
        self._lock = threading.Lock()  # (members and the stack: the retry thread adds to them)
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
        """No shard is joined after this returns; a join under way is not waited for (a master that never
        answers would hold the stop for the RPC timeout): its thread leaves that shard once in."""
        with self._lock:
            self._stop.set()

    def close(self) -> None:
        """Leaves every shard joined (their sessions closed, their files let go)."""
        self.stop_joining()
        self._stack.close()

    def _try(self, shard: int, first: bool = False) -> bool:
        """True once shard is done with: joined, or joined and left again as the stop came meanwhile."""
        try:
            if self._reach is not None:
                self._reach(shard)
            if not self._enter(shard):
                return True
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
        if not first:
            log.warning("joined shard %d of %d (%s)", shard, self.shards, self._where[shard])
        return True

    def _enter(self, shard: int) -> bool:
        """Joins shard; False when the stop came while it joined (it is then left at once)."""
        with ExitStack() as joined:
            member = joined.enter_context(self._join(shard))
            with self._lock:
                if not self._stop.is_set():
                    self._members[shard] = member
                    self._stack.push(joined.pop_all())
                    return True
            if self._leave is not None:
                self._leave(member)
        log.warning(
            "left shard %d of %d (%s) as it joined: the process is stopping",
            shard,
            self.shards,
            self._where[shard],
        )
        return False

    def _join_later(self, missing: list[int]) -> None:
        pause = FIRST_RETRY_SECONDS
        while missing and not self._stop.wait(pause):
            # (once the stop is asked, the shards left are not tried)
            missing = [shard for shard in missing if self._stop.is_set() or not self._try_quietly(shard)]
            pause = min(pause * 2, LONGEST_RETRY_SECONDS)

    def _try_quietly(self, shard: int) -> bool:
        """One more try; any error but an unreachable master is logged and retried too (the process serves
        the other shards: a refusal here must not take them down)."""
        try:
            return self._try(shard)
        except Exception as exc:
            log.error(
                "shard %d of %d (%s) refused this process: %s", shard, self.shards, self._where[shard], exc
            )
            return False


def master_answers(config: StoreConfig) -> None:
    """Raises MasterUnavailableError unless the master `config` reaches says hello within HELLO_SECONDS
    (its RPC timeout if shorter); its other refusals as a join meets them (another shard's master, a
    bad secret)."""
    seconds = min(config.rpc_timeout, HELLO_SECONDS)
    client = MasterClient(
        locator(config.master, config.etcd, config.cluster, seconds),
        seconds,
        busy_poll_us=0,
        shard=config.shard,
    )
    try:
        client.hello()
    finally:
        client.close()
