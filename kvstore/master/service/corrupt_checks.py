"""A replica a reader found corrupt is dropped only once the node that holds it says its bytes fail the
object's checksum (issue 22: a forged "corrupt" report deleted another client's object). A report queues a
check for that node (on its work channel, as copies are); the node hashes the bytes there and answers
(whether the allocation is still the same one the master judges: confirm_corrupt drops only a replica
the object still has); a check not answered in time is forgotten (the replica stays: a miss for that
reader, never a loss for everyone)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from kvstore.master.ledger.model import Replica
from kvstore.rpc import messages as m

CHECK_SECONDS = 30.0  # a check not answered by then is forgotten
MAX_PENDING = 65536  # checks waiting at once (reports past it are ignored until some end)


@dataclass(slots=True)
class _Check:
    key: str
    replica: Replica
    size: int
    checksum: int
    deadline: float
    issued: bool = False


class CorruptChecks:
    def __init__(self, wake: Callable[[str], None], clock: Callable[[], float]) -> None:
        self._wake = wake  # wakes the node's parked work poll
        self._clock = clock
        self._ids = itertools.count(1)
        self._checks: dict[int, _Check] = {}
        self._asked: set[tuple[str, int, int]] = set()  # (key, segment, offset) already being checked
        self.refuted = 0  # reports the node's own hash disproved

    def ask(self, key: str, replica: Replica, size: int, checksum: int) -> None:
        """The node holding `replica` is asked whether its bytes match `checksum` (once at a time)."""
        where = (key, replica.segment.id, replica.offset)
        if where in self._asked or len(self._checks) >= MAX_PENDING:
            return
        self._asked.add(where)
        self._checks[next(self._ids)] = _Check(key, replica, size, checksum, self._clock() + CHECK_SECONDS)
        self._wake(replica.segment.client_id)

    def take(self, client_id: str, limit: int) -> list[m.ChecksumCheck]:
        """At most `limit` checks for this node's segments, each handed out once."""
        out: list[m.ChecksumCheck] = []
        for check_id, c in self._checks.items():
            if len(out) >= limit:
                break
            r = c.replica
            if not c.issued and r.segment.client_id == client_id:
                c.issued = True
                region = r.segment.region_id
                out.append(m.ChecksumCheck(check_id, region, r.offset, c.size, c.checksum))
        return out

    def answer(self, client_id: str, check_id: int, intact: bool) -> tuple[str, Replica, int] | None:
        """The node's answer; (key, replica, checksum) to drop when its bytes failed, else None. An answer
        from another node than the replica's, or for a check forgotten, changes nothing."""
        c = self._checks.get(check_id)
        if c is None or c.replica.segment.client_id != client_id:
            return None
        self._end(check_id, c)
        if intact:
            self.refuted += 1
            return None
        return c.key, c.replica, c.checksum

    def expire(self) -> None:
        now = self._clock()
        for check_id, c in [(i, c) for i, c in self._checks.items() if c.deadline <= now]:
            self._end(check_id, c)

    def _end(self, check_id: int, c: _Check) -> None:
        del self._checks[check_id]
        self._asked.discard((c.key, c.replica.segment.id, c.replica.offset))

    def pending(self) -> int:
        return len(self._checks)
