"""Removing objects and evicting them: removals (a leased object only when forced), a reader's report
of a corrupt replica, and eviction in the order the planner proposes (kvstore.master.planners.victims), down
to the low watermark or for room a put needs."""

from __future__ import annotations

from collections.abc import Collection

from kvstore.errors import KVStoreError, ObjectBusyError, ObjectNotFoundError
from kvstore.master.ledger.changes import ObjectsBuried, ReplicaDropped
from kvstore.master.ledger.groups import Group, group_id, members
from kvstore.master.ledger.model import Replica
from kvstore.master.ledger.objects import ObjectMeta
from kvstore.master.planners.victims import RoomComing
from kvstore.master.service.roles import Roles
from kvstore.master.service.state_core import StateCore


class Removal:
    """Removals, corrupt replicas and eviction: what goes, and the tombstones that keep it gone."""

    def __init__(self, core: StateCore, roles: Roles) -> None:
        """`core`: the tables and primitives it works on; `roles`: who may force the removal of another's."""
        self.config, self.clock, self.counters = core.config, core.clock, core.counters
        self.objects, self.ledger, self.space, self.disk = core.objects, core.ledger, core.space, core.disk
        self.policy, self.replicator, self.victims = core.policy, core.replicator, core.victims
        self.corrupt_checks = core.corrupt_checks
        self._delete, self._delete_many, self.usage = core.delete, core.delete_many, core.usage
        self.check_admin = roles.check_admin

    def remove(self, key: str, force: bool = False, by: str | None = None) -> None:
        """Removes `key` for client `by` (None: the master's own call). A leased object goes only with
        `force`, and of an object another client wrote only an admin may force it: no member cuts off
        the readers of others' data."""
        whole = self._removable(key, force, by, ())
        self._bury([m.key for m in whole])
        self._delete_many(whole)

    def remove_many(
        self, keys: list[str], force: bool = False, by: str | None = None
    ) -> list[KVStoreError | None]:
        """remove() of each key in turn, as one batch: each key is checked as if the ones before it were
        gone already (a group's second member, a key named twice: not found), then those that may go go
        together (one _bury, delete_many). Per key, its error or None."""
        errors: list[KVStoreError | None] = []
        doomed: list[ObjectMeta] = []
        gone: set[str] = set()
        for key in keys:
            try:
                whole = self._removable(key, force, by, gone)
            except KVStoreError as exc:
                errors.append(exc)
                continue
            errors.append(None)
            doomed += whole
            gone.update([m.key for m in whole])
        if doomed:
            self._bury([m.key for m in doomed])
            self._delete_many(doomed)
        return errors

    def _removable(self, key: str, force: bool, by: str | None, gone: Collection[str]) -> list[ObjectMeta]:
        """What removing `key` takes (its group's committed members with it), checked as remove() says;
        `gone`: keys taken already (not found)."""
        meta = None if key in gone else self.objects.get(key)
        if meta is None or not meta.complete:
            raise ObjectNotFoundError(f"no object {key!r}")
        whole = self._whole(meta)  # removing a group member removes its group
        if max([m.lease_until for m in whole]) > self.clock():
            if not force:
                raise ObjectBusyError(f"{key!r} is leased to a reader; retry later or force")
            if by is not None and (not by or any(m.writer != by for m in whole)):
                self.check_admin(by, f"forcing the removal of {key!r} (another client's, leased to a reader)")
        return whole

    def _whole(self, meta: ObjectMeta) -> list[ObjectMeta]:
        """`meta` and, when it is a committed group member, every other committed member of its group."""
        group = group_id(meta.key) if meta.group else None
        return [meta] if group is None else self._committed_members(group)

    def _committed_members(self, group: Group) -> list[ObjectMeta]:
        found = [self.objects.get(key) for key in members(group)]
        return [m for m in found if m is not None and m.complete]

    def drop_incomplete_groups(self, groups: list[Group]) -> None:
        """Drops the committed members of groups still missing some (kvstore.master.ledger.groups: too old, or
        first to go under pressure); nobody could read them."""
        for group in groups:
            doomed = self._committed_members(group)
            if not doomed:  # (never expected: the index counts what the table holds; no endless eviction)
                self.ledger.groups.forget(group)
                continue
            self.counters.incomplete_groups_dropped += 1
            self._bury([m.key for m in doomed], evicted=True)
            self._delete_many(doomed)

    def remove_all(self, force: bool = False, by: str | None = None) -> list[str]:
        """Removes every finished object (leased ones only with `force`); returns their keys. For a
        client (`by`; None: the master's own call), an admin's call only (kvstore.master.service.roles)."""
        if by is not None:
            self.check_admin(by, "remove_all")
        now = self.clock()
        doomed = [m for m in self.objects.values() if m.complete and (force or m.lease_until <= now)]
        self._bury([m.key for m in doomed])
        self._delete_many(doomed)  # (in passes: 100k objects one at a time took seconds)
        return [m.key for m in doomed]

    def _bury(self, keys: list[str], evicted: bool = False) -> None:
        """Leaves tombstones for `keys`, which go now (kvstore.master.ledger.tombstones): a node that did not
        hear of it yet cannot bring them back by naming them to a restore."""
        book, now = self.space.fences.tombstones, self.clock()
        book.lapse(now, self._restoring)
        until = now + 2 * self.config.client_ttl
        self.ledger.apply([ObjectsBuried(keys, self.space.fences.current, until, evicted)])

    def _restoring(self) -> bool:
        """Some segment's or disk's node is still naming what it holds."""
        return any(s.restoring is not None for s in self.space.segments.values()) or any(
            d.restoring for d in self.disk.segments.values()
        )

    def report_corrupt(self, key: str, engine: str, region_id: int, offset: int, checksum: int) -> None:
        """A reader's checksum failed on this replica: the node holding it is asked to hash its bytes
        (kvstore.master.service.corrupt_checks); confirm_corrupt acts on its answer. Ignored unless the reader
        expected this object's checksum (its location may be stale)."""
        found = self._replica_at(key, engine, region_id, offset, checksum)
        if found is not None:
            self.corrupt_checks.ask(key, found, self.objects[key].size, checksum)

    def confirm_corrupt(self, client_id: str, check_id: int, intact: bool) -> None:
        """The node's answer to a check: a replica whose bytes failed is dropped (the object goes with its
        last replica) and the object is planned for re-replication up to the count it was put with."""
        failed = self.corrupt_checks.answer(client_id, check_id, intact)
        if failed is None:
            return
        key, replica, checksum = failed
        meta = self.objects.get(key)
        if meta is None or not meta.complete or meta.checksum != checksum or replica not in meta.replicas:
            return  # gone, or rewritten, since it was reported
        self.ledger.apply([ReplicaDropped(key, replica)])
        self.space.free(key, replica, read_until=meta.lease_until)
        self.counters.corrupt_replicas += 1
        if not meta.replicas:
            self._bury([key])
            self._delete(meta)
        else:
            self.replicator.touched.add(key)

    def _replica_at(
        self, key: str, engine: str, region_id: int, offset: int, checksum: int
    ) -> Replica | None:
        meta = self.objects.get(key)
        if meta is None or not meta.complete or meta.checksum != checksum:
            return None
        for replica in meta.replicas:
            seg = replica.segment
            if (seg.engine, seg.region_id, replica.offset) == (engine, region_id, offset):
                return replica
        return None  # already dropped, or a stale location

    def evict_one(
        self, leased_too: bool = True, disk_backed_only: bool = False, wait_for_room: bool = False
    ) -> bool:
        """Evicts the object the planner proposes (kvstore.master.planners.victims: its arguments); False when
        nothing may go. One with a disk record loses only its memory replicas and stays readable."""
        # Groups missing a member for a put timeout go first: invisible, they hold memory for nothing.
        stale = self.ledger.groups.stale(self.clock() - self.config.put_timeout)
        if stale:
            self.drop_incomplete_groups(stale[:1])
            return True
        victim = self.victims.choose(leased_too, disk_backed_only, wait_for_room)
        if victim is None:
            return False
        whole = self._whole(victim)  # a group goes whole: to disk if every member has a record, else lost
        self.counters.evictions += len(whole)
        self.counters.evicted_bytes += sum([m.size for m in whole])
        if any(m.disk is None for m in whole):
            self._bury([m.key for m in whole], evicted=True)
            self._delete_many(whole)
            return True
        for m in whole:
            self._evict_to_disk(m)
        return True

    def _evict_to_disk(self, victim: ObjectMeta) -> None:
        """Its memory replicas go, fenced like a removal's; it stays readable from its disk record."""
        self.counters.evictions_to_disk += 1
        self.disk.forget(victim.key)  # a load or demotion of it in flight is moot now
        self.replicator.forget(victim.key)
        dropped = list(victim.replicas)
        self.ledger.drop_replicas(victim.key, dropped)
        for r in dropped:
            self.space.free(victim.key, r, read_until=victim.lease_until)
        self.policy.on_remove(victim.key)

    def evict_to_watermark(self) -> int:
        """Above the high watermark, evicts down to the low one. With a working disk tier only objects
        that have disk records go (nothing is lost to make room ahead of need: the next tick goes on once
        demotion gave more of them records). Returns the number evicted."""
        if self.usage() <= self.config.high_watermark:
            return 0
        disk_backed_only = self.disk.working()
        evicted = 0
        try:
            while self.usage() > self.config.low_watermark and self.evict_one(
                leased_too=False, disk_backed_only=disk_backed_only, wait_for_room=True
            ):
                evicted += 1
        except RoomComing:
            pass
        return evicted
