"""The disk tier's bookkeeping: nodes' disk files, where each object's disk record lives, and the disk
work nodes do for the master (the master never moves data).

- **Demotion** copies cold objects to disk ahead of need: while memory is above `demote_watermark`, the
  objects memory eviction would take next get a disk record, written by the disk's node. Eviction then
  drops only their memory replicas: the object stays readable from disk. A put waits for this only when
  the object it would evict is still being demoted, or has not been reached by planning yet (puts came
  faster than the watermark's budget: its demotion starts then) — at most `put_room_wait`; then it is
  dropped.
- **Loads** bring a disk-only object back into memory for a reader: the disk's node reads its record and
  copies it into an allocation of its own memory segment (when memory holds only objects without disk
  records, a load waits for a demotion in flight to end, at most `disk_read_wait`). After one read that
  memory copy is transient (the first thing eviction takes); read again within `promote_window` seconds,
  the object is promoted: its memory copy joins the eviction policy like any other (evicting it later
  costs nothing either way: the disk record stays).
- Every record is verified when read back (key, size, checksum): a torn, stale or corrupt record is a
  failed load and a miss, never bytes.

Disk space is carved by the same offset allocator as memory (4 KiB aligned for direct I/O) and evicted
by the same pluggable policies when a demotion needs room.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field

from kvstore.config.master import MasterConfig
from kvstore.master.ledger.changes import DiskDegraded, DiskRecordDropped, DiskRecordSet, ReplicaAdded
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import DiskReplica, DiskSegment, Replica
from kvstore.master.ledger.node_acks import AckWaiters
from kvstore.master.ledger.objects import DISK_ORDER, ObjectMeta, TableOrder
from kvstore.master.planners.disk_space import DiskSpace
from kvstore.master.planners.eviction import EvictionPolicy, make_policy
from kvstore.master.planners.placement import SegmentSpace, placement_of
from kvstore.rpc import messages as m


@dataclass
class DiskTask:
    id: int
    kind: str  # "demote" | "load"
    key: str
    disk: DiskReplica
    memory: Replica  # demote: the replica read from; load: the allocation written to
    deadline: float
    issued: bool = False
    waiters: list[Callable[[], object]] = field(default_factory=list)  # readers / puts waiting on it

    def order(self, meta: ObjectMeta) -> m.DiskOrder:
        memory = placement_of(self.memory)
        return m.DiskOrder(self.id, self.kind, self.key, meta.size, meta.checksum, self.disk.offset, memory)


class DiskTier:
    def __init__(
        self,
        config: MasterConfig,
        clock: Callable[[], float],
        space: SegmentSpace,
        ledger: Ledger,
        memory_policy: EvictionPolicy,
    ) -> None:
        self.config = config
        self.clock = clock
        self.space = space
        self.ledger = ledger  # the one writer of the objects' records and replicas
        self.objects: Mapping[str, ObjectMeta] = ledger.objects
        self.memory_policy = memory_policy
        # Records are evicted in an order of the same kind, kept in the table too.
        disk_order = TableOrder(ledger.objects, DISK_ORDER)
        self.disk_space = DiskSpace(ledger, make_policy(config.eviction_policy, disk_order))
        self.policy = self.disk_space.policy
        self.segments = self.disk_space.segments  # read-only here: the ledger writes it
        self.tasks: dict[int, DiskTask] = {}
        self._by_key: dict[str, DiskTask] = {}  # at most one task per object
        # Freed records each node is to forget, oldest first: sent until acknowledged (a removal waits for
        # it: a master that dies after the reply cannot have the record offered back to the next one).
        self._drops: dict[str, list[m.DiskDrop]] = {}
        self._drop_acks = AckWaiters(self._lowest_drop, clock)
        self._next_task = 1
        self.on_lost: Callable[[ObjectMeta], None] = lambda meta: None  # an object lost its last copy
        self.make_room: Callable[[], bool] = lambda: False  # evicts one memory victim (loads need room)
        self.demotions = self.demote_failures = self.loads = self.load_failures = self.disk_evictions = 0
        self.restored = 0  # records restarted nodes offered back
        self.promotions = 0
        self.direct_reads = 0  # disk-only objects read from the file by a reader on the disk's host
        self.served_reads = 0  # ... and by readers elsewhere, the disk's node serving its file
        # Demotions ended here before their node reported them (cancelled, timed out), by order id: the
        # node may still write the record, so its disk space is reused only once the node reports.
        self._unreported: dict[int, DiskTask] = {}
        # Loads that found no room while demotions were in flight: (key, on_done, give up at).
        self._want_room: list[tuple[str, Callable[[], object], float]] = []
        # Objects whose memory copy came from one disk read (key -> load time), oldest first: evicted first.
        self.transient: OrderedDict[str, float] = OrderedDict()

    # -- segments -------------------------------------------------------------------------------------
    def drop_client(self, client_id: str) -> None:
        """The node is gone: its disk records with it (objects left with no copy are lost)."""
        for seg in [s for s in self.segments.values() if s.client_id == client_id]:
            self.disk_space.unmount(seg)
            for task in [t for t in self.tasks.values() if t.disk.segment is seg]:
                self._finish(task, ok=False)
            for order in [o for o, t in self._unreported.items() if t.disk.segment is seg]:
                del self._unreported[order]  # the space went with the disk
            for key in self.ledger.objects.keys_on(seg):
                meta = self.objects.get(key)
                if meta is not None and meta.disk is not None and meta.disk.segment is seg:
                    self.ledger.apply([DiskRecordDropped(key)])
                    self.policy.on_remove(key)
                    if not meta.replicas:
                        self.on_lost(meta)
        self._drops.pop(client_id, None)
        self._drop_acks.check(client_id)

    def set_degraded(self, client_id: str, reason: str) -> None:
        """The node's disk fails writes (`reason`): nothing is demoted to it, and puts do not wait for
        demotions, until its node says writes work again (reason ""). Its records stay readable."""
        for seg in list(self.segments.values()):
            if seg.client_id == client_id:
                self.ledger.apply([DiskDegraded(seg, reason)])

    def working(self) -> bool:
        """Some disk takes demotions."""
        return any(not s.degraded and not s.restoring for s in self.segments.values())

    # -- demotion -------------------------------------------------------------------------------------
    def plan(
        self, usage: float, capacity: int, candidates: Callable[[], Iterator[str]], urgent: bool = False
    ) -> None:
        """Above the demote watermark, gives disk records to the next objects memory eviction would take
        (as many bytes as the watermark leaves free), so evicting them loses nothing. `urgent` (puts are
        evicting objects planning had not reached): as many as the disk queue takes (`disk_tasks`)."""
        if not self.working() or (usage <= self.config.demote_watermark and not urgent):
            return
        budget = capacity if urgent else capacity * (1 - self.config.demote_watermark)
        in_flight = sum(1 for t in self.tasks.values() if t.kind == "demote")
        woken: set[str] = set()
        for key in candidates():
            if budget <= 0 or in_flight >= self.config.disk_tasks:
                break
            meta = self.objects.get(key)
            if meta is None or not meta.complete or not meta.replicas:
                continue
            budget -= meta.size
            if meta.disk is not None or meta.pinned or key in self._by_key:
                continue
            node = self._demote(meta)
            if node is None:
                break  # no disk can take it, even by evicting: try again later
            in_flight += 1
            woken.add(node)
        for client_id in woken:
            self._wake(client_id)

    def demote_now(self, meta: ObjectMeta) -> bool:
        """Starts demoting an object eviction is about to take that planning did not reach (puts came
        faster than the watermark's budget): True when its demotion is now in flight."""
        if meta.disk is not None or meta.pinned or not meta.complete or not meta.replicas:
            return False
        if meta.key in self._by_key or not self.working():
            return False
        node = self._demote(meta)
        if node is not None:
            self._wake(node)
        return node is not None

    def _demote(self, meta: ObjectMeta) -> str | None:
        """Queues a demotion of `meta` to a disk that can take it; the disk's node, else None."""
        disk = self._place(meta.key, meta.size, exclude=())
        if disk is None:
            return None
        self._add(DiskTask(self._next_task, "demote", meta.key, disk, meta.replicas[0], self._deadline()))
        return disk.segment.client_id

    def _place(self, key: str, size: int, exclude: Collection[int]) -> DiskReplica | None:
        space = self.disk_space
        for seg in space.candidates(size, exclude):
            while (record := space.take(seg, key, size)) is None:
                if not self._evict_from(seg):
                    break
            if record is not None:
                return record
        return None

    def _evict_from(self, seg: DiskSegment) -> bool:
        """Drops the disk policy's first record on `seg` no task is using; False when none may go."""
        for key in self.policy.candidates():
            meta = self.objects.get(key)
            if meta is None or meta.disk is None or meta.disk.segment is not seg or key in self._by_key:
                continue
            self.disk_evictions += 1
            self.drop_record(meta)
            if not meta.replicas:
                self.on_lost(meta)
            return True
        return False

    def drop_record(self, meta: ObjectMeta) -> None:
        """Frees the object's disk record (a load reading it meanwhile fails its check: never bytes) and
        has its node mark it dead in its index."""
        disk = meta.disk
        if disk is None:
            return
        if meta.alive:  # (the same object still: not dropped meanwhile)
            self.ledger.apply([DiskRecordDropped(meta.key)])
        self.policy.on_remove(meta.key)
        self.disk_space.free(meta.key, disk)
        if self.disk_space.mounted(disk.segment):
            self._queue_drops(disk.segment.client_id, [(disk.offset, meta.key)])

    # -- reads --------------------------------------------------------------------------------------
    def read_from_file(self, meta: ObjectMeta, host_id: str) -> str:
        """How a reader on `host_id` reads this disk-only object without a load: "here" (the disk is on
        its host: it reads the file itself), "served" (the disk's node serves the record from its file
        over the network), or "" (its node loads it into memory first: this read promotes the object,
        being a second one within promote_window; or a load of it is under way, which the reader joins;
        or the reader did not say where it is)."""
        disk = meta.disk
        if disk is None or not host_id:
            return ""
        seg = disk.segment
        how = "here" if seg.host_id == host_id and seg.path else "served" if seg.file_region else ""
        now = self.clock()
        if not how or meta.key in self._by_key:
            return ""
        if meta.loaded_at and now - meta.loaded_at <= self.config.promote_window:
            return ""
        self.ledger.loaded(meta, now)  # a read from disk: the next one within the window promotes
        if how == "here":
            self.direct_reads += 1
        else:
            self.served_reads += 1
        return how

    def reread(self, meta: ObjectMeta) -> None:
        """A read of a disk-only object (a lookup, or a read a client served from its lease): the second
        within promote_window has its node load it into memory, where it is promoted."""
        if meta.replicas or meta.disk is None or meta.key in self._by_key or not meta.loaded_at:
            return
        if self.clock() - meta.loaded_at <= self.config.promote_window:
            self.load(meta, lambda: None)

    # -- loads ----------------------------------------------------------------------------------------
    def load(self, meta: ObjectMeta, on_done: Callable[[], object]) -> bool:
        """Has the disk's node copy a disk-only object into its memory; `on_done` runs when that ended
        either way. False (nothing started) when there is no memory for it there now."""
        task = self._by_key.get(meta.key)
        if task is not None and task.kind == "load":
            task.waiters.append(on_done)
            return True
        disk = meta.disk
        if disk is None or task is not None:
            return False  # a demotion of a disk-only object cannot be running: nothing to wait for
        others = [s.id for s in self.space if s.client_id != disk.segment.client_id]
        mine = [s for s in self.space if s.client_id == disk.segment.client_id and s.size >= meta.size]
        if not mine:
            return False
        for _ in range(64):  # bounded: each round evicts one memory victim
            placed = self.space.place(meta.key, meta.size, 1, exclude=others)
            if placed is not None or not self.make_room():
                break
        if placed is None:
            if not self._demoting_from(disk.segment.client_id):
                return False
            # Room comes once a demotion ends (its object may then leave memory): try again then.
            self._want_room.append((meta.key, on_done, self.clock() + self.config.disk_read_wait))
            return True
        task = DiskTask(
            self._next_task, "load", meta.key, disk, placed[0], self._deadline(), waiters=[on_done]
        )
        self._add(task)
        self._wake(disk.segment.client_id)
        return True

    # -- nodes ----------------------------------------------------------------------------------------
    def take(self, client_id: str, limit: int = 1 << 30) -> list[m.DiskOrder]:
        """At most `limit` orders for this node's disk not handed out yet."""
        out: list[m.DiskOrder] = []
        for task in self.tasks.values():
            if len(out) >= limit:
                break
            meta = self.objects.get(task.key)
            if not task.issued and task.disk.segment.client_id == client_id and meta is not None:
                task.issued = True
                out.append(task.order(meta))
        return out

    def forget_records(self, disk: DiskSegment, records: list[tuple[int, str]]) -> None:
        """The node is to mark these (offset, key) records dead, though this master never took them (a
        restore refused them: they were removed)."""
        self._queue_drops(disk.client_id, records)

    def _queue_drops(self, client_id: str, records: list[tuple[int, str]]) -> None:
        # Each names its key's removal (an older removal's, for an eviction, covers nothing alive): the
        # node keeps it, so a memory replica that missed its kill cannot bring the key back.
        new_id, buried = self.space.fences.new_id, self.space.fences.tombstones.generation
        drops = (m.DiskDrop(o, key, new_id(), buried(key)) for o, key in records)
        self._drops.setdefault(client_id, []).extend(drops)
        self._wake(client_id)

    def take_drops(self, client_id: str, limit: int = 1 << 30) -> list[m.DiskDrop]:
        """At most `limit` records for the node to forget, oldest first (it applies them before new
        orders); each is sent until the node acknowledges it."""
        return self._drops.get(client_id, [])[:limit]

    def acknowledge_drops(self, client_id: str, through: int) -> None:
        """The node has every drop numbered up to `through`."""
        drops = self._drops.get(client_id)
        if drops:
            done = next((i for i, d in enumerate(drops) if d.seq > through), len(drops))
            del drops[:done]
            if not drops:
                del self._drops[client_id]
        self._drop_acks.check(client_id)

    def _lowest_drop(self, client_id: str) -> int | None:
        drops = self._drops.get(client_id)
        return drops[0].seq if drops else None

    def drops_since(self, first_id: int) -> dict[str, int]:
        """Per node, the last drop queued for it with an id from `first_id` on (FenceBook.new_id)."""
        return {c: d[-1].seq for c, d in self._drops.items() if d and d[-1].seq >= first_id}

    def when_dropped(self, marks: dict[str, int], waiter: Callable[[], None], seconds: float) -> bool:
        """False when each node acknowledged every drop up to its mark; else `waiter()` runs once they
        have (or the node is gone) within `seconds`."""
        return self._drop_acks.wait(marks, waiter, seconds)

    def _wake(self, client_id: str) -> None:
        self.space.polls.wake(client_id)

    def complete(self, client_id: str, results: list[m.DiskResult]) -> None:
        for order, ok in results:
            late = self._unreported.get(order)
            if late is not None and late.disk.segment.client_id == client_id:
                del self._unreported[order]  # the node is done with it: its record's space can be reused
                self.disk_space.release(late.disk)
                continue
            task = self.tasks.get(order)
            if task is not None and task.disk.segment.client_id == client_id:
                self._finish(task, ok, reported=True)
        self._retry_loads()

    def _demoting_from(self, client_id: str) -> bool:
        """A demotion of an object in this node's memory is in flight."""
        return any(
            t.kind == "demote" and t.memory.segment.client_id == client_id for t in self.tasks.values()
        )

    def _retry_loads(self) -> None:
        """Loads waiting for room try again (demotions ended); those past their wait are misses."""
        waiting, self._want_room = self._want_room, []
        now = self.clock()
        for key, on_done, give_up in waiting:
            meta = self.objects.get(key)
            if give_up < now or meta is None or not self.load(meta, on_done):
                on_done()

    def _finish(self, task: DiskTask, ok: bool, reported: bool = False) -> None:
        """Ends a task: `reported` when its node said how it went (else the master gave up on it)."""
        del self.tasks[task.id]
        del self._by_key[task.key]
        meta = self.objects.get(task.key)
        alive = meta is not None and meta.complete and self.disk_space.mounted(task.disk.segment)
        if task.kind == "demote":
            if ok and alive and meta is not None and meta.disk is None:
                self.ledger.apply([DiskRecordSet(task.key, task.disk)])
                self.policy.on_insert(task.key, meta.size)
                self.demotions += 1
            else:
                self.demote_failures += 1
                late = task.issued and not reported  # the node may still write the record
                self.disk_space.free(task.key, task.disk, hold=late)
                if late:
                    self._unreported[task.id] = task
        else:
            if ok and alive and meta is not None and meta.disk == task.disk:
                self.ledger.apply([ReplicaAdded(task.key, task.memory)])
                self.loads += 1
                now = self.clock()
                self.transient.pop(task.key, None)
                if meta.loaded_at and now - meta.loaded_at <= self.config.promote_window:
                    self.promote(meta)  # read from disk twice within the window
                else:
                    self.transient[task.key] = now
                self.ledger.loaded(meta, now)
            else:
                self.load_failures += 1
                # The node reported (or the task timed out): it may still be copying, so the space waits
                # for its fence either way.
                self.space.free(task.key, task.memory, hold=True)
        for waiter in task.waiters:
            waiter()

    def demoting(self, key: str) -> bool:
        task = self._by_key.get(key)
        return task is not None and task.kind == "demote"

    def some_demotion(self) -> str | None:
        """The key of a demotion in flight (the oldest), if any."""
        return next((t.key for t in self.tasks.values() if t.kind == "demote"), None)

    def when_demoted(self, key: str, callback: Callable[[], object]) -> None:
        """Runs `callback` once the object's demotion in flight ends, either way."""
        self._by_key[key].waiters.append(callback)

    def read(self, meta: ObjectMeta) -> None:
        """A read of an object in memory: a transient copy read again within the window is promoted."""
        loaded = self.transient.get(meta.key)
        if loaded is not None and self.clock() - loaded <= self.config.promote_window:
            del self.transient[meta.key]
            self.promote(meta)

    def promote(self, meta: ObjectMeta) -> None:
        self.memory_policy.on_insert(meta.key, meta.size)
        self.promotions += 1

    def forget(self, key: str) -> None:
        """The object is gone (or left memory): its task, if any, ends as failed (space freed once safe)."""
        self.transient.pop(key, None)
        task = self._by_key.get(key)
        if task is not None:
            self._finish(task, ok=False)

    def forget_many(self, keys: list[str]) -> None:
        """forget() of each key (only those it holds anything of are looked at)."""
        gone = set(keys)
        for key in (self.transient.keys() | self._by_key.keys()) & gone:
            self.forget(key)

    def expire(self) -> None:
        now = self.clock()
        for task in [t for t in self.tasks.values() if t.deadline < now]:
            self._finish(task, ok=False)
        if self._want_room:
            self._retry_loads()

    def credit_stall(self, seconds: float) -> None:
        for task in self.tasks.values():
            task.deadline += seconds

    def _deadline(self) -> float:
        return self.clock() + self.config.disk_task_timeout

    def _add(self, task: DiskTask) -> None:
        self._next_task += 1
        self.tasks[task.id] = task
        self._by_key[task.key] = task

    def stats(self) -> dict[str, int]:
        return {
            "disk_capacity": self.disk_space.capacity,
            "disk_used": self.disk_space.used,
            "disk_objects": sum(s.allocations for s in self.segments.values()),
            "disk_tasks": len(self.tasks),
            "demotions": self.demotions,
            "demote_failures": self.demote_failures,
            "loads": self.loads,
            "load_failures": self.load_failures,
            "disk_evictions": self.disk_evictions,
            "disk_restored": self.restored,
            "promotions": self.promotions,
            "disk_direct_reads": self.direct_reads,
            "disk_served_reads": self.served_reads,
            "disks_degraded": (degraded := sum(1 for s in self.segments.values() if s.degraded)),
            "disks_broken": degraded,  # the name before disks could recover (kept for scripts)
        }
