"""Reads as the master sees them: a lookup with a fresh lease, reads clients served themselves, prefix
matches and existence checks (each a use: eviction order and replication heat see it), and
change_replica."""

from __future__ import annotations

from kvstore.errors import InvalidArgumentError, ObjectNotFoundError
from kvstore.master.ledger.objects import ATTENTION, IN_MEMORY, ON_DISK, ObjectMeta
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
        cfg, now = self.config, self.clock()
        # (a lease on one member holds the whole group: kvstore.master.ledger.groups)
        (found,) = self.ledger.use(
            [key], now, now + cfg.lease_ttl, cfg.heat_half_life, self.replicator.hot_heat, True
        )
        self.policy.on_access(key)
        self._used(key, found, meta)
        self.counters.hits += 1
        return meta

    def locate_many(self, keys: list[str], prefix: bool) -> tuple[bytes, list[Note]]:
        """get_replicas of a batch in one crossing into the table (Ledger.locate_many: leases, accesses and
        heat are updated there, the reply is encoded there, and the hits move last in the eviction order
        when the policy's order is the table's: EvictionPolicy.read_touch), then what the eviction orders,
        replication and the disk tier see of the hits. Returns the reply, msgpack-encoded (per key its
        ObjectLocation, or nil: a miss, with `prefix` every key after the first miss; also a hit with no
        copy in memory), and the notes of the hits with no copy in memory (index, key, False, disk
        segment, attention) among others. Not while a segment is suspect: its replicas must not be
        offered (get_replicas filters them)."""
        cfg, now, disk, policy = self.config, self.clock(), self.disk, self.policy
        touch = policy.read_touch()  # (the policy's order is the table's: the lookup moves the hits too)
        order, sample = touch if touch is not None else (-1, 1)
        reply, told, notes, hits = self.ledger.locate_many(
            keys,
            prefix,
            now,
            now + cfg.lease_ttl,
            cfg.heat_half_life,
            self.replicator.hot_heat,
            bool(disk.transient),
            order,
            sample,
        )
        if touch is None:
            policy.on_access_many(told)  # (every hit)
        else:
            policy.on_touched(told)
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
        self.counters.hits += hits
        asked = len(keys) if not prefix or hits == len(keys) else hits + 1
        self.counters.misses += asked - hits
        return reply, [note for note in notes if not note[2]]

    def touch(self, keys: list[str]) -> None:
        """Reads a client served itself (from a leased location): they count as accesses (no lease)."""
        cfg = self.config
        found = self.ledger.use(keys, self.clock(), 0.0, cfg.heat_half_life, self.replicator.hot_heat, True)
        used = [(key, bits) for key, bits in zip(keys, found, strict=True) if bits]
        self.policy.on_access_many([key for key, _ in used])  # (one call for the batch, as locate_many)
        for key, bits in used:
            self._used(key, bits)
        self.counters.hits += len(used)

    def _used(self, key: str, found: int, meta: ObjectMeta | None = None) -> None:
        """The rest of a use the ledger applied (`found`: Ledger.use's bits): a second use of a copy loaded
        from disk promotes it, the disk tier's order sees it, and replication looks at it when the rule says
        so. The memory tier's eviction order is the caller's to tell, once per batch (on_access_many)."""
        disk = self.disk
        if found & ON_DISK or (disk.transient and found & IN_MEMORY):
            if meta is None:
                meta = self.objects[key]
            if disk.transient and found & IN_MEMORY:
                disk.read(meta)
            elif not found & IN_MEMORY:
                disk.reread(meta)
        if found & ON_DISK:  # the disk tier's order is by use too, not by when the record was written
            disk.policy.on_access(key)
        if found & ATTENTION:  # hot, short of copies, or a set count
            self.replicator.note_attention(key)

    def match_prefix(self, keys: list[str]) -> list[ObjectMeta]:
        """The leading run of `keys` that are stored (stops at the first absent one); a use (heat, eviction
        order), not a read: no lease, not counted."""
        matched = []
        for key in keys:
            if not self.exists(key):
                break
            matched.append(self.objects[key])
        cfg, hot_heat = self.config, self.replicator.hot_heat
        found = self.ledger.use(
            [m.key for m in matched], self.clock(), 0.0, cfg.heat_half_life, hot_heat, False
        )
        self.policy.on_access_many([meta.key for meta in matched])
        for meta, bits in zip(matched, found, strict=True):
            self._used(meta.key, bits, meta)
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
