"""Reads as the master sees them: a lookup with a fresh lease, reads clients served themselves, prefix
matches and existence checks (each a use: eviction order and replication heat see it), and
change_replica."""

from __future__ import annotations

from kvstore.errors import InvalidArgumentError, ObjectNotFoundError
from kvstore.master.ledger.objects import ObjectMeta
from kvstore.master.service.state_core import StateCore

# A hit the caller of locate_many completes: (its index in the batch, key, whether a copy is in memory,
# disk segment (0: none), attention).
Note = tuple[int, str, bool, int, bool]


class Access:
    """Reads as the master sees them: each one a use that leases, orders and heats what it finds."""

    def __init__(self, core: StateCore) -> None:
        """`core`: the tables and primitives it works on."""
        self.config, self.clock, self.counters = core.config, core.clock, core.counters
        self.objects, self.ledger, self.space, self.disk = core.objects, core.ledger, core.space, core.disk
        self.policy, self.replicator = core.policy, core.replicator
        self.exists, self.offered = core.exists, core.offered
        self.any_suspect = core.space.any_suspect  # (while one is, readers are told replicas one by one)

    def get_replicas(self, key: str) -> ObjectMeta | None:
        """The object, for a reader, with a fresh lease; None on a miss (also when every replica is on a
        segment suspected unreachable). Readers are given `offered(meta)`."""
        meta = self.objects.get(key)
        if meta is None or not meta.visible or (self.space.any_suspect() and not self.exists(key)):
            self.counters.misses += 1
            return None
        now = self.clock()
        meta.lease_until = max(meta.lease_until, now + self.config.lease_ttl)
        if meta.group:  # a lease on one member holds the whole group (kvstore.master.ledger.groups)
            self.ledger.objects.table.lease_groups([key], meta.lease_until)
        self._read(meta, now)
        return meta

    def locate_many(self, keys: list[str], prefix: bool) -> tuple[bytes, list[Note]]:
        """get_replicas of a batch in one crossing into the table (ObjectTable.locate_many: leases,
        accesses and heat are updated there, and the reply is encoded there), then what the eviction
        orders, replication and the disk tier see of the hits. Returns the reply, msgpack-encoded (per key
        its ObjectLocation, or nil: a miss, with `prefix` every key after the first miss; also a hit with
        no copy in memory), and the notes of the hits with no copy in memory (index, key, False, disk
        segment, attention) among others. Not while a segment is suspect: its replicas must not be
        offered (get_replicas filters them)."""
        cfg, now, objects, disk = self.config, self.clock(), self.ledger.objects, self.disk
        reply, hit_keys, notes = objects.table.locate_many(
            keys,
            prefix,
            now,
            now + cfg.lease_ttl,
            cfg.heat_half_life,
            self.replicator.hot_heat,
            objects.places,
            bool(disk.transient),
        )
        self.policy.on_access_many(hit_keys)
        replicator = self.replicator
        for _, key, in_memory, on_disk, attention in notes:
            if attention:
                replicator.note_attention(key)
            if on_disk or (disk.transient and in_memory):  # the disk tier's part of a use (_used)
                meta = self.objects[key]
                if disk.transient and in_memory:
                    disk.read(meta)
                elif not in_memory and on_disk:
                    disk.reread(meta)
                if on_disk:
                    disk.policy.on_access(key)
        hits = len(hit_keys)
        self.counters.hits += hits
        asked = len(keys) if not prefix or hits == len(keys) else hits + 1
        self.counters.misses += asked - hits
        return reply, [note for note in notes if not note[2]]

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
        if meta is None or not meta.visible:
            raise ObjectNotFoundError(f"no object {key!r}")
        if not 0 <= replicas <= self.config.max_replicas:
            raise InvalidArgumentError(f"replicas must be 0..{self.config.max_replicas}")
        self.replicator.change_replica(meta, replicas)

    def exists_many(self, keys: list[str]) -> list[bool]:
        """exists() per key; one crossing into the table for the batch while no segment is suspect (a
        scheduler asks this per request: a method call per key cost 4x)."""
        if self.space.any_suspect():
            return [self.exists(k) for k in keys]
        return self.ledger.objects.complete_many(keys)
