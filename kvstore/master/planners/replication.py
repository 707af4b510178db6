"""Hot-key replication. Keys read often gain replicas on other segments, copied by the destination
segment's own client (told through its heartbeat reply) so the master never moves data; keys that cool
down lose the extra replicas again; `change_replica(key, n)` asks for an exact count.

Heat is an access count decayed with a half-life, kept in the object table by the one read rule
(csrc/meta/object_use, applied through the ledger's use methods); hot above `hot_access_rate` accesses/s,
cool below `cool_access_rate`. Extra replicas only use free space: replication never evicts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvstore.config import MasterConfig
from kvstore.master.ledger.changes import ReplicaAdded, ReplicaDropped, ReplicaTargetSet
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import Replica, Segment
from kvstore.master.ledger.objects import ObjectMeta
from kvstore.master.planners.placement import SegmentSpace, placement_of
from kvstore.rpc import messages


@dataclass
class CopyTask:
    id: int
    key: str
    dest: Replica  # its segment's client does the copy
    source: Replica
    deadline: float
    issued: bool = False

    @property
    def segment(self) -> Segment:
        return self.dest.segment

    def describe(self, meta: ObjectMeta) -> messages.CopyTask:
        src, dst = self.source, self.dest
        source = placement_of(src)
        return messages.CopyTask(
            self.id, self.key, meta.size, meta.checksum, source, dst.segment.id, dst.offset, dst.slot, dst.gen
        )


class Replicator:
    def __init__(
        self,
        config: MasterConfig,
        clock: Callable[[], float],
        space: SegmentSpace,
        ledger: Ledger,
    ) -> None:
        self.config = config
        self.clock = clock
        self.space = space  # copies are placed (and freed) by the same writer as puts
        self.ledger = ledger  # the one writer of the objects' replicas
        self.objects: Mapping[str, ObjectMeta] = ledger.objects
        self.tasks: dict[int, CopyTask] = {}
        self._by_key: dict[str, list[CopyTask]] = {}  # the same tasks, by object key
        self._next = 1
        self.touched: set[str] = set()  # accessed since the last plan
        self.extra: set[str] = set()  # holding more replicas than they asked for
        self.copies_done = 0
        self.copies_failed = 0
        self.dropped = 0

    # -- heat -----------------------------------------------------------------------------------------
    @property
    def hot_heat(self) -> float:
        """The heat at which an object is hot (its rate reaches hot_access_rate)."""
        return self.config.hot_access_rate * self.config.heat_half_life / math.log(2)

    def note_attention(self, key: str) -> None:
        """A read found this object hot, short of copies or with a set count (the read rule: Ledger.use,
        Ledger.locate_many); others would keep their replicas as they are: not looked at."""
        self.touched.add(key)

    def rate(self, meta: ObjectMeta) -> float:
        """Accesses per second (the decayed count over its mean life): the heat the table keeps, decayed
        to now (Ledger.heat_at)."""
        half_life = self.config.heat_half_life
        return self.ledger.heat_at(meta, self.clock(), half_life) * math.log(2) / half_life

    def change_replica(self, meta: ObjectMeta, replicas: int) -> None:
        self.ledger.apply([ReplicaTargetSet(meta.key, replicas)])  # (its nodes are told: SegmentSpace)
        self.touched.add(meta.key)
        if replicas:
            self.extra.add(meta.key)

    # -- planning -------------------------------------------------------------------------------------
    def desired(self, meta: ObjectMeta) -> int:
        cfg = self.config
        if meta.target_replicas:
            return meta.target_replicas
        rate = self.rate(meta)
        current = len(meta.replicas)
        if rate >= cfg.hot_access_rate:
            return max(current, min(cfg.max_hot_replicas, len(self.space)))
        if rate < cfg.cool_access_rate:
            return meta.base_replicas
        return current

    def plan(self) -> None:
        """Adds copy tasks for keys below their desired count, drops replicas above it."""
        keys, self.touched = self.touched | self.extra, set()
        for key in keys:
            meta = self.objects.get(key)
            if meta is None or not meta.complete:
                self.extra.discard(key)
                continue
            want = self.desired(meta)
            pending = self._by_key.get(key, [])
            have = len(meta.replicas) + len(pending)
            if have < want:
                self._add_copy(meta, pending)
            elif len(meta.replicas) > want and not pending:
                self._drop_one(meta)
            planned = len(meta.replicas) + len(self._by_key.get(key, []))
            if planned > meta.base_replicas or meta.target_replicas:
                self.extra.add(key)
            else:
                self.extra.discard(key)

    def _add_copy(self, meta: ObjectMeta, pending: list[CopyTask]) -> None:
        if not meta.replicas:
            return
        used = {r.segment.id for r in meta.replicas} | {t.segment.id for t in pending}
        # Another host first (spreads reads over NICs), then placement's draw; copies never evict.
        placed = self.space.place(
            meta.key, meta.size, 1, exclude=used, spread_from={r.segment.host_id for r in meta.replicas}
        )
        if placed is None:
            return
        task = CopyTask(
            self._next, meta.key, placed[0], meta.replicas[0], self.clock() + self.config.put_timeout
        )
        self._next += 1
        self.tasks[task.id] = task
        self._by_key.setdefault(task.key, []).append(task)
        self.space.polls.wake(task.segment.client_id)

    def _unlink(self, task: CopyTask) -> None:
        del self.tasks[task.id]
        siblings = self._by_key[task.key]
        siblings.remove(task)
        if not siblings:
            del self._by_key[task.key]

    def _drop_one(self, meta: ObjectMeta) -> None:
        if meta.lease_until > self.clock() or len(meta.replicas) <= 1:
            return  # a reader may be using any replica: wait for its lease to end
        replica = meta.replicas[-1]  # the newest: originals stay
        self.ledger.apply([ReplicaDropped(meta.key, replica)])
        self.space.free(meta.key, replica)
        self.dropped += 1

    def _free(self, task: CopyTask, writing: bool = True) -> None:
        """Frees a copy's destination; unless its copier reported it over, the copier may still be
        writing there, so the space waits for the node's fence."""
        self.space.free(task.key, task.dest, hold=writing)

    # -- clients --------------------------------------------------------------------------------------
    def tasks_for(self, client_id: str, limit: int = 1 << 30) -> list[messages.CopyTask]:
        """At most `limit` copy tasks for the segments of this client, each handed out once."""
        out: list[messages.CopyTask] = []
        for task in self.tasks.values():
            if len(out) >= limit:
                break
            meta = self.objects.get(task.key)
            if not task.issued and task.segment.client_id == client_id and meta is not None:
                task.issued = True
                out.append(task.describe(meta))
        return out

    def complete(self, client_id: str, task_id: int, ok: bool) -> None:
        task = self.tasks.get(task_id)
        if task is None or task.segment.client_id != client_id:
            return  # expired or cancelled meanwhile; its space is already freed
        self._unlink(task)
        meta = self.objects.get(task.key)
        if ok and meta is not None and meta.complete:
            self.ledger.apply([ReplicaAdded(meta.key, task.dest)])
            self.copies_done += 1
        else:
            self._free(task, writing=False)
            self.copies_failed += 1

    # -- cleanup --------------------------------------------------------------------------------------
    def forget(self, key: str) -> None:
        """The object is gone: cancel its copies."""
        for task in list(self._by_key.get(key, [])):
            self._unlink(task)
            self._free(task)
        self.extra.discard(key)
        self.touched.discard(key)

    def forget_many(self, keys: list[str]) -> None:
        """forget() of each key (only those it holds anything of are looked at)."""
        gone = set(keys)
        for key in self._by_key.keys() & gone:
            self.forget(key)
        self.extra -= gone
        self.touched -= gone

    def drop_segment(self, segment: Segment) -> None:
        """Copies to or from a vanished segment are cancelled (its space goes with it)."""
        for task in [t for t in self.tasks.values() if segment in (t.segment, t.source.segment)]:
            self._unlink(task)
            self._free(task)

    def credit_stall(self, seconds: float) -> None:
        """The master did not run for `seconds`: copies in flight get that time back."""
        for task in self.tasks.values():
            task.deadline += seconds

    def expire(self) -> None:
        now = self.clock()
        for task in [t for t in self.tasks.values() if t.deadline < now]:
            self._unlink(task)
            self._free(task)
            self.copies_failed += 1
