"""ShardJoins' stop: a node asked to stop while its retry thread is inside a join (a master that took the
connection and is slow to answer the registration) stops at once; the thread, once its join is in, leaves
that shard again (the clean stop's leave, then the join's own exit) and never lists it as joined. Before:
stop_joining waited for the join to end (up to the RPC timeout)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kvstore.cluster.shard_joins import ShardJoins
from kvstore.errors import MasterUnavailableError


class _Shards:
    """Two shards as a node meets them: shard 0 answers at once; shard 1 cannot be reached at start,
    then its join takes until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.inside = threading.Event()
        self.events: list[str] = []
        self._tries = 0

    @contextmanager
    def join(self, shard: int) -> Iterator[str]:
        if shard == 1:
            self._tries += 1
            if self._tries == 1:
                raise MasterUnavailableError("shard 1: cannot reach its master")
            self.inside.set()
            self.release.wait(30)
        self.events.append(f"joined {shard}")
        try:
            yield f"member {shard}"
        finally:
            self.events.append(f"exited {shard}")

    def leave(self, member: str) -> None:
        self.events.append(f"left {member}")


def test_a_stop_during_a_join_returns_at_once_and_the_join_is_left() -> None:
    shards = _Shards()
    joins = ShardJoins(2, shards.join, ["a", "b"], leave=shards.leave)
    joins.start()
    assert joins.members() == ["member 0", None]
    assert shards.inside.wait(10), "the retry thread never tried shard 1 again"

    asked = time.monotonic()
    stopping = threading.Thread(target=joins.stop_joining)
    stopping.start()
    stopping.join(timeout=5)
    assert not stopping.is_alive(), "stop_joining waited for the join under way"
    assert time.monotonic() - asked < 5
    assert joins.members() == ["member 0", None]

    shards.release.set()  # the join under way gets in after the stop: left, never listed
    deadline = time.monotonic() + 10
    while "exited 1" not in shards.events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert shards.events[-3:] == ["joined 1", "left member 1", "exited 1"], shards.events
    assert joins.members() == ["member 0", None]
    joins.close()
    assert shards.events[-1] == "exited 0"
    assert shards.events.count("exited 1") == 1


def test_without_a_stop_the_retry_joins_the_shard() -> None:
    shards = _Shards()
    shards.release.set()
    joins = ShardJoins(2, shards.join, ["a", "b"], leave=shards.leave)
    joins.start()
    deadline = time.monotonic() + 10
    while joins.members()[1] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert joins.members() == ["member 0", "member 1"]
    joins.close()
    assert sorted(e for e in shards.events if e.startswith("exited")) == ["exited 0", "exited 1"]
    assert not any(e.startswith("left") for e in shards.events)  # (leaving is run_node's on a stop)


def test_a_master_that_does_not_say_hello_is_tried_again_without_joining() -> None:
    """`reach` is asked before each try: while it refuses, join is never entered."""
    shards = _Shards()
    shards.release.set()
    answered = threading.Event()

    def reach(shard: int) -> None:
        if shard == 1 and not answered.is_set():
            raise MasterUnavailableError("shard 1: hello timed out")

    joins = ShardJoins(2, shards.join, ["a", "b"], reach=reach, leave=shards.leave)
    joins.start()
    time.sleep(1.0)  # (a retry 0.5 s after the start)
    assert joins.members() == ["member 0", None] and "joined 1" not in shards.events
    answered.set()
    deadline = time.monotonic() + 10
    while joins.members()[1] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert joins.members() == ["member 0", "member 1"]
    joins.close()
