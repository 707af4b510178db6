"""The master's metadata: clients, segments, objects, leases, placement and eviction.

Pure bookkeeping, no I/O: the RPC service calls it from one event loop, tests call it directly with a
fake clock. Data never passes through here; clients move it through the transfer engine.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence

from kvstore.config.master import MasterConfig
from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    NoSpaceError,
    NotFoundError,
    ObjectBusyError,
    ObjectExistsError,
    ObjectNotFoundError,
    TooManyPutsError,
)
from kvstore.master import restore
from kvstore.master.changes import ObjectDropped, PutsCommitted, ReplicaAdded, ReplicaDropped
from kvstore.master.disk_tier import DiskTier
from kvstore.master.eviction import EvictionPolicy, make_policy
from kvstore.master.fences import FenceBook
from kvstore.master.ledger import Ledger
from kvstore.master.model import Client, Counters, ObjectMeta, Replica, Segment
from kvstore.master.node_polls import NodePolls
from kvstore.master.pending import PutsInProgress
from kvstore.master.placement import SegmentSpace
from kvstore.master.replication import Replicator
from kvstore.master.victims import RoomComing, VictimPlanner

__all__ = ["MasterState", "RoomComing"]


class MasterState:
    def __init__(self, config: MasterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.policy: EvictionPolicy = make_policy(config.eviction_policy)
        polls = NodePolls()  # each node's one work poll: whoever queues work for a node wakes it
        # The one writer of the segment, object, space and fence tables (kvstore.master.ledger).
        self.ledger = Ledger(FenceBook(clock, polls.wake))
        self.space = SegmentSpace(config.allocation_alignment, clock, self.ledger, polls)  # space in segments
        self.clients: dict[str, Client] = {}
        self._by_node: dict[str, str] = {}  # node identity -> the client registered with it
        self.objects: Mapping[str, ObjectMeta] = self.ledger.objects
        self.ledger.watch(ReplicaAdded, self._hold_added)
        self.replicator = Replicator(config, clock, self.space, self.ledger)
        self.disk = DiskTier(config, clock, self.space, self.ledger, self.policy)
        self.disk.on_lost = self._delete
        self.disk.make_room = functools.partial(self._evict_one, disk_backed_only=True)
        self.victims = VictimPlanner(
            self.objects, self.policy, self.disk, clock, lambda urgent: self.plan_demotions(urgent)
        )
        # Puts started and not ended: expiry checks these every tick, not every object.
        self._pending = PutsInProgress()
        self.counters = Counters()

    @property
    def segments(self) -> Mapping[int, Segment]:
        return self.space.segments

    def _hold_added(self, records: list[ReplicaAdded]) -> None:
        """A copy that landed is told to its node (kvstore.master.holds; a put's replicas are told as
        they are placed)."""
        for r in records:
            meta = self.objects[r.key]
            if meta.complete:
                self.space.holds.hold(meta, r.replica)

    # -- clients and segments -----------------------------------------------------------------------
    def register_client(self, client_id: str, host_id: str, node_id: str = "") -> None:
        """Registers a client (again). A storage node that registers with the identity of an older
        registration is that node restarted: the old one is dropped at once (its process is gone), so
        what the node offers back (disk records) is taken, not deleted when the old TTL runs out."""
        client = self.clients.get(client_id)
        if client is not None:
            client.last_seen = self.clock()
            return
        old = self._by_node.get(node_id) if node_id else None
        if old is not None and old != client_id:
            self.counters.superseded_clients += 1
            self.drop_client(old)
        self.clients[client_id] = Client(client_id, host_id, self.clock(), node_id=node_id)
        if node_id:
            self._by_node[node_id] = client_id

    def heartbeat(self, client_id: str) -> bool:
        """False when the client is unknown (dropped): it must register and mount again. A heartbeat sent
        well after a client reported this client's segments unreachable proves them alive again."""
        client = self.clients.get(client_id)
        if client is None:
            return False
        now = client.last_seen = self.clock()
        for seg_id in client.segments:
            seg = self.space.segments.get(seg_id)
            if (
                seg is not None
                and not seg.usable
                and now - seg.suspect_since >= self.config.heartbeat_interval
            ):
                self.space.trust(seg)
        return True

    # -- what readers and writers report ---------------------------------------------------------------
    def report_unreachable(self, engine: str) -> None:
        """A client failed to reach this node: its segments are suspect — not placed on, their replicas
        not offered while another exists — until the node heartbeats again."""
        now = self.clock()
        for seg in list(self.space):
            if seg.engine == engine and self.space.suspect(seg, now):
                self.counters.suspected_segments += 1

    def report_corrupt(self, key: str, engine: str, region_id: int, offset: int, checksum: int) -> None:
        """A reader's checksum failed on this replica: it is dropped (the object goes with its last
        replica) and the object is planned for re-replication up to the count it was put with. Ignored
        unless the reader expected this object's checksum (its location may be stale)."""
        meta = self.objects.get(key)
        if meta is None or not meta.complete or meta.checksum != checksum:
            return
        for replica in meta.replicas:
            seg = replica.segment
            if (seg.engine, seg.region_id, replica.offset) == (engine, region_id, offset):
                break
        else:
            return  # already dropped, or a stale location
        self.ledger.apply([ReplicaDropped(key, replica)])
        self.space.free(key, replica, read_until=meta.lease_until)
        self.counters.corrupt_replicas += 1
        if not meta.replicas:
            self._delete(meta)
        else:
            self.replicator.touched.add(key)

    def offered(self, meta: ObjectMeta) -> list[Replica]:
        """The replicas a reader is given: those on segments not suspected unreachable."""
        if not self.space.any_suspect():
            return meta.replicas
        return [r for r in meta.replicas if r.segment.usable]

    def mount_segment(
        self,
        client_id: str,
        engine: str,
        region_id: int,
        size: int,
        host_id: str,
        fence_slots: int = 1 << 20,
        restoring: bool = False,
    ) -> int:
        client = self._client(client_id)
        seg = self.space.mount(client_id, engine, region_id, size, host_id, fence_slots, restoring)
        client.segments.add(seg.id)
        return seg.id

    def restore_segment(
        self,
        client_id: str,
        segment_id: int,
        records: list[tuple[int, int, int, str, int, int, bool, int]],
        last: bool,
    ) -> list[int]:
        """kvstore.master.restore.restore_segment: the replicas a node names back; returns the refused
        slots."""
        seg = self.segments.get(segment_id)
        if seg is None or seg.client_id != client_id:
            raise NotFoundError(f"client {client_id} has no segment {segment_id}")
        return restore.restore_segment(self, seg, records, last)

    def unmount_segment(self, client_id: str, segment_id: int) -> None:
        seg = self.segments.get(segment_id)
        if seg is None or seg.client_id != client_id:
            raise NotFoundError(f"client {client_id} has no segment {segment_id}")
        self._drop_segment(seg)

    def drop_client(self, client_id: str) -> None:
        client = self.clients.pop(client_id, None)
        if client is None:
            return
        if client.node_id and self._by_node.get(client.node_id) == client_id:
            del self._by_node[client.node_id]
        for seg_id in list(client.segments):
            seg = self.segments.get(seg_id)
            if seg is not None:
                self._drop_segment(seg)
        for meta in [m for m in self._pending.values() if m.writer == client_id]:
            self._delete(meta)
        self._pending.forget(client_id)
        self.disk.drop_client(client_id)
        self.space.holds.drop_client(client_id)
        self.space.polls.forget(client_id)

    def _drop_segment(self, seg: Segment) -> None:
        """Every replica on the segment disappears; objects left without a replica disappear too."""
        self.replicator.drop_segment(seg)
        for key in self.space.unmount(seg):
            meta = self.objects.get(key)
            if meta is None:
                continue
            self.ledger.drop_replicas(key, [r for r in meta.replicas if r.segment is seg])
            if not meta.replicas and meta.disk is None:
                self._delete(meta)
            elif not meta.replicas:
                self.policy.on_remove(key)  # on disk only now
        client = self.clients.get(seg.client_id)
        if client:
            client.segments.discard(seg.id)

    def check_client(self, client_id: str) -> None:
        """NotFoundError unless the client is registered (it must register again after a restart)."""
        self._client(client_id)

    def _client(self, client_id: str) -> Client:
        client = self.clients.get(client_id)
        if client is None:
            raise NotFoundError(f"unknown client {client_id}; register first")
        return client

    # -- puts -----------------------------------------------------------------------------------------
    def start_puts(
        self,
        client_id: str,
        items: Sequence[tuple[str, int, int]],
        replicas: int,
        pin: bool,
        min_replicas: int,
        wait_for_room: bool,
        out: list[list[Replica] | KVStoreError | None],
    ) -> None:
        """put_start of each (key, size, checksum) of `items` from len(out) on, appending to `out` its
        replicas, None (already stored), or its error: one bad item fails alone. Raises RoomComing at an
        item that waits for room (those before it are in `out`: call again to go on from it)."""
        self._client(client_id)  # only registered clients may write: the request fails, not each item
        for key, size, checksum in items[len(out) :]:
            try:
                out.append(
                    self.put_start(client_id, key, size, checksum, replicas, pin, min_replicas, wait_for_room)
                )
            except KVStoreError as exc:
                out.append(exc)

    def put_start(
        self,
        client_id: str,
        key: str,
        size: int,
        checksum: int,
        replicas: int,
        pin: bool,
        min_replicas: int = 0,
        wait_for_room: bool = False,
    ) -> list[Replica] | None:
        """Allocates replicas for a new object; None when the same bytes are already stored. With
        `min_replicas`, fewer than `replicas` (not below it) are placed when fewer distinct segments are
        usable: the caller sees how many in the placement. With `wait_for_room`, raises RoomComing
        (nothing placed) rather than evict for room that is on its way. The nodes are told of the
        replicas at once, while the client writes them (kvstore.master.holds)."""
        self._client(client_id)
        if not 1 <= replicas <= self.config.max_replicas:
            raise InvalidArgumentError(f"replicas must be 1..{self.config.max_replicas}")
        existing = self.objects.get(key)
        if existing is None and self.space.fences.fencing(key):
            raise ObjectBusyError(f"{key!r} was just removed; its old replicas are being fenced off, retry")
        if existing is not None:
            if not existing.complete:
                raise ObjectBusyError(f"a put of {key!r} is in progress")
            if existing.size == size and existing.checksum == checksum:
                self.policy.on_access(key)  # offered again: a use, as far as eviction is concerned
                return None  # same key, same bytes: nothing to write
            raise ObjectExistsError(f"{key!r} already holds a different value; remove it first")
        asked = replicas
        if 0 < min_replicas < replicas:
            replicas = max(min_replicas, min(replicas, self.space.usable_for(size)))
        self._check_put_limits(client_id, size * replicas)  # before placing: nothing evicted for it
        placed = self._place(key, size, replicas, wait_for_room)
        now = self.clock()
        meta = ObjectMeta(
            key,
            size,
            checksum,
            placed,
            client_id,
            pinned=pin,
            put_deadline=now + self.config.put_timeout,
            last_access=now,
            base_replicas=asked,  # a degraded object is repaired up to it when read (replicator)
        )
        self.ledger.start(meta)  # PutStarted
        self._pending.add(meta)
        meta.hold_seq = self.space.holds.hold_all(meta, placed)  # told while the client writes
        return placed

    def put_end(self, client_id: str, key: str, plan: bool = True) -> None:
        """Makes the put visible (NotFoundError when no put of it by this client is in progress)."""
        (error,) = self.put_end_many(client_id, [key], plan)
        if error is not None:
            raise error

    def put_end_many(self, client_id: str, keys: list[str], plan: bool = True) -> list[NotFoundError | None]:
        """Makes the puts visible: per key None, or the error (no put of it by this client in progress)."""
        return self.commit_puts(client_id, keys, plan)[0]

    def commit_puts(
        self, client_id: str, keys: list[str], plan: bool = True
    ) -> tuple[list[NotFoundError | None], dict[str, int]]:
        """Makes the puts visible: per key None, or the error (no put of it by this client in progress).
        The ledger commits them in one batch. Also returns, per node of their replicas, the hold its
        acknowledgements must reach for it to hold them all (HoldBook.when_held: the master can lose
        them only until then). `plan`: plan demotions once, after the last (planning walks the coldest
        part of memory)."""
        pending = self._pending
        errors: list[NotFoundError | None] = []
        commits: list[str] = []
        marks: dict[str, int] = {}
        policy, counters, touched = self.policy, self.counters, self.replicator.touched
        for key in keys:
            meta = pending.get(key)
            if meta is None or meta.writer != client_id:
                errors.append(NotFoundError(f"no put of {key!r} in progress by this client"))
                continue
            errors.append(None)
            commits.append(key)
            pending.pop(key)
            seq = meta.hold_seq
            for replica in meta.replicas:
                node = replica.segment.client_id
                if marks.get(node, 0) < seq:
                    marks[node] = seq
            if len(meta.replicas) < meta.base_replicas:
                touched.add(key)  # degraded: the next plan adds copies where room appears
            policy.on_insert(key, meta.size)
            counters.puts += 1
            counters.put_bytes += meta.size
        if commits:
            self.ledger.apply([PutsCommitted(commits)])
        if plan and self.disk.segments:  # puts push the coldest objects toward eviction: give them records
            self.plan_demotions()
        return errors, marks

    def put_revoke(self, client_id: str, key: str) -> None:
        self._delete(self._pending_put(client_id, key))

    def _check_put_limits(self, client_id: str, nbytes: int) -> None:
        """TooManyPutsError when this client's puts in progress are at its limits: objects (at most half
        of all fence slots, whatever the setting) or bytes (a client with none in progress may always
        start one, however large, so every put can make progress)."""
        objects, held = self._pending.held(client_id)
        if objects == 0:
            return
        space = self.space
        most_objects = min(self.config.client_put_objects, max(1, space.fence_slots // 2))
        most_bytes = self.config.client_put_bytes or space.capacity // 2
        if objects < most_objects and held + nbytes <= most_bytes:
            return
        if objects >= most_objects:
            raise TooManyPutsError(
                f"this client has {objects} puts in progress, its limit; end or revoke some first"
            )
        if held + nbytes > most_bytes:
            raise TooManyPutsError(
                f"this client's puts in progress hold {held} bytes; {nbytes} more would pass its limit of "
                f"{most_bytes}: end or revoke some first"
            )

    def _pending_put(self, client_id: str, key: str) -> ObjectMeta:
        meta = self._pending.get(key)
        if meta is None or meta.writer != client_id:
            raise NotFoundError(f"no put of {key!r} in progress by this client")
        return meta

    def _place(self, key: str, size: int, replicas: int, wait_for_room: bool = False) -> list[Replica]:
        """Distinct segments, distinct hosts first; evicts (policy order) rather than fail for space.
        A segment with free bytes but no free allocation slot gets slots back when its node acknowledges
        the fences of freed allocations: evicting more would not help sooner, so (with `wait_for_room`)
        the put waits for that instead."""
        self.space.check_fits(size, replicas)
        while True:
            placed = self.space.place(key, size, replicas)
            if placed is not None:
                return placed
            if wait_for_room:
                nodes = self.space.awaiting_slots(size)
                if nodes:
                    raise RoomComing("slots", functools.partial(self.space.when_slots_return, nodes))
            if not self._evict_one(wait_for_room=wait_for_room):
                raise NoSpaceError(f"no space for {replicas} x {size} bytes, nothing left to evict")

    # -- reads ---------------------------------------------------------------------------------------
    def get_replicas(self, key: str) -> ObjectMeta | None:
        """The object, for a reader, with a fresh lease; None on a miss (also when every replica is on a
        segment suspected unreachable). Readers are given `offered(meta)`."""
        meta = self.objects.get(key)
        if meta is None or not meta.complete or (self.space.any_suspect() and not self.exists(key)):
            self.counters.misses += 1
            return None
        now = self.clock()
        meta.lease_until = max(meta.lease_until, now + self.config.lease_ttl)
        self._read(meta, now)
        return meta

    def touch(self, keys: list[str]) -> None:
        """Reads a client served itself (from a leased location): they count as accesses."""
        now = self.clock()
        for key in keys:
            meta = self.objects.get(key)
            if meta is not None and meta.complete:
                self._read(meta, now)

    def _used(self, meta: ObjectMeta, now: float) -> None:
        """A use of the object: eviction order and replication heat see it (and a second use of a copy
        loaded from disk promotes it)."""
        if self.disk.transient and meta.replicas:
            self.disk.read(meta)
        elif not meta.replicas and meta.disk is not None:
            self.disk.reread(meta)
        meta.last_access = now
        self.policy.on_access(meta.key)
        if meta.disk is not None:  # the disk tier's order is by use too, not by when the record was written
            self.disk.policy.on_access(meta.key)
        self.replicator.note_access(meta)

    def _read(self, meta: ObjectMeta, now: float) -> None:
        self._used(meta, now)
        meta.access_count += 1
        self.counters.hits += 1

    def match_prefix(self, keys: list[str]) -> list[ObjectMeta]:
        """The leading run of `keys` that are stored (stops at the first absent one); counts as access."""
        matched = []
        for key in keys:
            if not self.exists(key):
                break
            matched.append(self.objects[key])
        now = self.clock()
        for meta in matched:
            self._used(meta, now)
        return matched

    def change_replica(self, key: str, replicas: int) -> None:
        """Asks for exactly `replicas` copies of a stored object (0: let its heat decide again)."""
        meta = self.objects.get(key)
        if meta is None or not meta.complete:
            raise ObjectNotFoundError(f"no object {key!r}")
        if not 0 <= replicas <= self.config.max_replicas:
            raise InvalidArgumentError(f"replicas must be 0..{self.config.max_replicas}")
        self.replicator.change_replica(meta, replicas)

    def exists(self, key: str) -> bool:
        """Stored, and readable: at least one replica is not on a segment suspected unreachable."""
        meta = self.objects.get(key)
        return meta is not None and meta.complete and (bool(self.offered(meta)) or meta.disk is not None)

    def exists_many(self, keys: list[str]) -> list[bool]:
        """exists() per key; one dictionary lookup each while no segment is suspect (a scheduler asks
        this per request: a method call per key cost 4x)."""
        if self.space.any_suspect():
            return [self.exists(k) for k in keys]
        objects = self.objects
        return [(meta := objects.get(k)) is not None and meta.complete for k in keys]

    # -- removal and eviction -----------------------------------------------------------------------
    def remove(self, key: str, force: bool = False) -> None:
        meta = self.objects.get(key)
        if meta is None or not meta.complete:
            raise ObjectNotFoundError(f"no object {key!r}")
        if not force and meta.lease_until > self.clock():
            raise ObjectBusyError(f"{key!r} is leased to a reader; retry later or force")
        self._delete(meta)

    def remove_all(self, force: bool = False) -> list[str]:
        """Removes every finished object (leased ones only with `force`); returns their keys."""
        now = self.clock()
        doomed = [m for m in self.objects.values() if m.complete and (force or m.lease_until <= now)]
        for meta in doomed:
            self._delete(meta)
        return [m.key for m in doomed]

    def _delete(self, meta: ObjectMeta) -> None:
        # An unfinished put's writer may still be writing; a finished object's readers may hold its
        # locations while their lease lasts. Either way the node fences the allocations off first.
        writing = not meta.complete
        read_until = meta.lease_until if meta.complete else 0.0
        for r in meta.replicas:
            self.space.free(meta.key, r, writing=writing, read_until=read_until)
        self.disk.drop_record(meta)
        if self.objects.get(meta.key) is meta:
            self.ledger.apply([ObjectDropped(meta.key)])
        self._pending.pop(meta.key)
        self.policy.on_remove(meta.key)
        self.replicator.forget(meta.key)
        self.disk.forget(meta.key)

    def _evict_one(
        self, leased_too: bool = True, disk_backed_only: bool = False, wait_for_room: bool = False
    ) -> bool:
        """Evicts the object the planner proposes (kvstore.master.victims: its arguments); False when
        nothing may go. One with a disk record loses only its memory replicas and stays readable."""
        victim = self.victims.choose(leased_too, disk_backed_only, wait_for_room)
        if victim is None:
            return False
        self.counters.evictions += 1
        self.counters.evicted_bytes += victim.size
        if victim.disk is None:
            self._delete(victim)
            return True
        # Its memory replicas go, fenced like a removal's.
        self.counters.evictions_to_disk += 1
        self.disk.forget(victim.key)  # a load or demotion of it in flight is moot now
        self.replicator.forget(victim.key)
        dropped = list(victim.replicas)
        self.ledger.drop_replicas(victim.key, dropped)
        for r in dropped:
            self.space.free(victim.key, r, read_until=victim.lease_until)
        self.policy.on_remove(victim.key)
        return True

    @property
    def capacity(self) -> int:
        """Bytes of all mounted segments."""
        return self.space.capacity

    @property
    def used(self) -> int:
        """Bytes allocated in all segments."""
        return self.space.used

    def usage(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0

    def restore_disk(
        self, client_id: str, records: list[tuple[int, str, int, int]], last: bool = True
    ) -> int:
        """kvstore.master.restore.restore_disk: the records a restarted node's disk offers back; returns
        how many were taken."""
        self._client(client_id)
        seg = next((s for s in self.disk.segments.values() if s.client_id == client_id), None)
        if seg is None:
            raise NotFoundError(f"client {client_id} has no disk mounted")
        taken = restore.restore_disk(self, seg, records)
        if last:
            self.disk.disk_space.end_restore(seg)
        return taken

    def plan_demotions(self, urgent: bool = False) -> None:
        """Gives disk records to the objects eviction would take next (kvstore.master.disk_tier)."""
        self.disk.plan(self.usage(), self.capacity, self.policy.candidates, urgent)

    def evict_to_watermark(self) -> int:
        """Above the high watermark, evicts down to the low one. With a working disk tier only objects
        that have disk records go (nothing is lost to make room ahead of need: the next tick goes on once
        demotion gave more of them records). Returns the number evicted."""
        if self.usage() <= self.config.high_watermark:
            return 0
        disk_backed_only = self.disk.working()
        evicted = 0
        try:
            while self.usage() > self.config.low_watermark and self._evict_one(
                leased_too=False, disk_backed_only=disk_backed_only, wait_for_room=True
            ):
                evicted += 1
        except RoomComing:
            pass
        return evicted

    # -- time -------------------------------------------------------------------------------------------
    def credit_stall(self, seconds: float) -> None:
        """The master itself did not run for `seconds` (a paused VM, SIGSTOP, swap, one request holding the
        loop): nobody could reach it, so that time counts neither as a client's silence nor against the
        deadlines of puts and copies in progress. Silence is judged by what the master could receive."""
        if seconds <= 0:
            return
        self.counters.stalls += 1
        self.counters.stalled_seconds += seconds
        for client in self.clients.values():
            client.last_seen += seconds
        for meta in self._pending.values():
            meta.put_deadline += seconds
        self.replicator.credit_stall(seconds)
        self.disk.credit_stall(seconds)

    def expire(self) -> None:
        """Drops silent clients and reclaims abandoned puts."""
        now = self.clock()
        for client in [c for c in self.clients.values() if now - c.last_seen > self.config.client_ttl]:
            self.counters.dropped_clients += 1
            self.drop_client(client.id)
        for meta in [m for m in self._pending.values() if m.put_deadline < now]:
            self.counters.reclaimed_puts += 1
            self._delete(meta)
        self.replicator.expire()
        self.disk.expire()
        self.ledger.lapse_fences()

    def stats(self) -> dict[str, float | int]:
        return {
            "objects": len(self.objects) - len(self._pending),
            "pending_puts": len(self._pending),
            "bytes": self.ledger.stored_bytes,
            "capacity": self.capacity,
            "used": self.used,
            "usage": self.usage(),
            "segments": len(self.segments),
            # mounted but still naming back what their node holds: a get of what they hold misses till then
            "segments_restoring": sum(1 for s in self.segments.values() if s.restoring is not None),
            "clients": len(self.clients),
            "replica_copies": self.replicator.copies_done,
            "replica_copy_failures": self.replicator.copies_failed,
            "replicas_dropped": self.replicator.dropped,
            "copy_tasks": len(self.replicator.tasks),
            **self.space.fences.stats(),
            **self.space.holds.stats(),
            **self.disk.stats(),
            **vars(self.counters),
        }
