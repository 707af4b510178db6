"""What a master process is in its cluster, as monitoring sees it (/health, /metrics): a single master, a
standby, or the leader, of which cluster and shard, and the leadership it knows (epoch, leader address).

A leader knows its own leadership. A standby learns its leader from the leader key in etcd (the signed
record kvstore.master.wire.election writes; the epoch is the revision that wrote it), read when asked and
at most every READ_SECONDS, so a probe every second costs etcd one read per standby per READ_SECONDS. A
probe waits for that read only WAIT_SECONDS, then answers with what it knew: with etcd slow or away a
standby still answers its liveness probe at once (a probe that timed out would have it restarted).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvstore.rpc.etcd_records import LEADER as LEADER_RECORD

if TYPE_CHECKING:
    from kvstore.master.wire.election import Election

log = logging.getLogger("kvstore.master")

SINGLE, STANDBY, LEADER = "single", "standby", "leader"
READ_SECONDS = 0.5  # a standby reads the leader key at most this often
WAIT_SECONDS = 0.25  # a probe waits no longer for a read (which goes on and is taken when it comes)


@dataclass(frozen=True)
class Leadership:
    """The leader a master knows of: its address and epoch (the revision of the write that made it
    leader); an empty address when there is none (the epoch then is the last leader's)."""

    address: str = ""
    epoch: int = 0


LeaderReader = Callable[[], Leadership]  # blocking (an etcd read): run on a thread


@dataclass
class Role:
    """One master process's place in its cluster. `cluster` is the cluster's own name (not a shard's),
    `address` the RPC address it publishes (its advertised one)."""

    cluster: str
    shard: tuple[int, int]
    address: str
    name: str = SINGLE
    leadership: Leadership = Leadership()
    read_leader: LeaderReader | None = None  # a standby's way to the leader key
    _read_at: float = field(default=0.0, repr=False)
    _reading: asyncio.Future[Leadership] | None = field(default=None, repr=False)

    @property
    def leading(self) -> bool:
        """It serves: the leader, or a master without a cluster to elect in."""
        return self.name != STANDBY

    def lead(self, epoch: int) -> None:
        self.name, self.leadership = LEADER, Leadership(self.address, epoch)

    def stand_by(self, read_leader: LeaderReader) -> None:
        """Waits to lead; the leader it sees comes from `read_leader`. The last leadership known stays
        until the next read replaces it (the old leader, while its key lives)."""
        self.name, self.read_leader, self._read_at = STANDBY, read_leader, 0.0

    async def refresh(self) -> None:
        """A standby reads the leader key again unless it did within READ_SECONDS (one read at a time,
        shared by the callers), and waits up to WAIT_SECONDS for it; a read that fails keeps what it knew."""
        if self.name != STANDBY or self.read_leader is None:
            return
        if self._reading is None:
            if time.monotonic() - self._read_at < READ_SECONDS:
                return
            loop = asyncio.get_running_loop()
            self._reading = asyncio.ensure_future(loop.run_in_executor(None, self.read_leader))
            self._reading.add_done_callback(self._read)
        await asyncio.wait({self._reading}, timeout=WAIT_SECONDS)

    def _read(self, reading: asyncio.Future[Leadership]) -> None:
        """A read ended (runs before its waiters resume): take what it found while still a standby."""
        self._reading, self._read_at = None, time.monotonic()
        if reading.cancelled():
            return
        failure = reading.exception()
        if failure is not None:  # etcd cannot be asked now: the last answer stands
            log.debug("cannot read the leader key: %s", failure)
        elif self.name == STANDBY:
            found = reading.result()
            # No leader now (its lease ended, or a record that does not verify): the epoch stays the last
            # one known, so it never goes back (a failover is one change of it, not two).
            self.leadership = found if found.address else Leadership("", self.leadership.epoch)

    def describe(self) -> dict[str, object]:
        """The role as /health says it."""
        return {
            "role": self.name,
            "cluster": self.cluster,
            "shard": self.shard[0],
            "shards": self.shard[1],
            "address": self.address,
            "leader": self.leadership.address or None,
            "epoch": self.leadership.epoch,
        }


def leader_reader(election: Election) -> LeaderReader:
    """Reads the leader key over the election's own etcd connection: the leader its record names (a
    record that does not verify names none) and the revision that wrote it."""

    def read() -> Leadership:
        value, meta = election.client.get(election.key)
        if value is None:
            return Leadership()
        record = election.records.decode(LEADER_RECORD, value, meta.lease_id)
        return Leadership(record.address, int(meta.mod_revision)) if record is not None else Leadership()

    return read
