"""Taking back what nodes still hold after a restart (this master's, or the node's): the replicas a
segment names (kvstore.master.ledger.holds told the node them) and the records a disk offers. Each one that
fits what this master knows becomes a replica or disk copy of its object again, or the object itself when
the key is unknown; one that conflicts (another value of the key, a put of it in progress, space or a
slot taken) is refused, never merged. So is one this master removed meanwhile (its tombstone covers the
generation: kvstore.master.ledger.tombstones), and the node forgets it.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Sequence

from kvstore.config.master import MasterConfig
from kvstore.errors import InvalidArgumentError
from kvstore.master.ledger.changes import (
    DiskRecordSet,
    ObjectRestored,
    ObjectsAdopted,
    ReplicaRestored,
    ReplicaTargetSet,
    TombstonesLearned,
)
from kvstore.master.ledger.holds import NamedBack
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.model import Counters, DiskSegment, Segment
from kvstore.master.ledger.objects import NewObject, ObjectMeta
from kvstore.master.ledger.tombstones import Tombstones
from kvstore.master.planners.disk_tier import DiskTier
from kvstore.master.planners.eviction import EvictionPolicy
from kvstore.master.planners.placement import SegmentSpace
from kvstore.master.service.batches import first_repeat, first_where
from kvstore.rpc.messages import RestoreRecord

RUN_FIRST, MAX_RUN = 16, 16384  # records the first run of a request looks at; the most any looks at
# A record's fields by its declaration's names, read in C (a node's records and a test's tuples alike).
_SLOT, _GEN, _KEY = (operator.itemgetter(RestoreRecord._fields.index(f)) for f in ("slot", "gen", "key"))
_TARGET_AT = RestoreRecord._fields.index("target")  # the last field: absent from a previous version's node
_TARGET = operator.itemgetter(_TARGET_AT)
_AS_ADOPTED = operator.itemgetter(slice(0, _TARGET_AT))  # less its target: what the table adopts (in C)


class Restore:
    """The state's collaborator for what nodes name back: it is handed the tables and tiers it works on
    (not the whole state) and keeps, per segment being restored, the order its copies came back in."""

    def __init__(
        self,
        config: MasterConfig,
        clock: Callable[[], float],
        ledger: Ledger,
        space: SegmentSpace,
        disk: DiskTier,
        policy: EvictionPolicy,
        counters: Counters,
        delete: Callable[[ObjectMeta], None],
    ) -> None:
        """`policy`: the memory tier's eviction order; `delete(meta)`: drops an object as a removal does."""
        self.config = config
        self.clock = clock
        self.ledger = ledger
        self.objects = ledger.objects
        self.space = space
        self.fences = space.fences
        self.disk = disk
        self.policy = policy
        self.counters = counters
        self._delete = delete
        # Per segment being restored: (generation, key) of the copies it named, for the eviction order.
        self.order: dict[int, list[tuple[int, str]]] = {}

    def forget(self, segment_id: int) -> None:
        """The segment is gone: the order of what it named back no longer matters."""
        self.order.pop(segment_id, None)

    def restore_segment(
        self,
        seg: Segment,
        records: Sequence[NamedBack],
        last: bool,
        removed: Sequence[tuple[str, int]] | None = None,
    ) -> list[int]:
        """Takes back the replicas named in `records` ([offset, slot, gen, key, size, checksum, pinned,
        replicas, target], newest first; target optional) on `seg`, mounted to be restored, after the
        removals the node remembers (`removed`: take_removed); `last` ends its restore (it is placed on
        from then, and evicted from). Returns the refused slots: the node fences them off."""
        if seg.restoring is None:
            raise InvalidArgumentError(f"segment {seg.id} was not mounted to be restored")
        if removed:
            self.take_removed(removed)
        now = self.clock()
        refused: list[int] = []
        tombs = self.fences.tombstones
        # Memory's eviction order learns of them once the restore ends, oldest allocation first (they come
        # newest first): the order they were put in, not the reverse, and none is evicted half-restored.
        to_order = self.order.setdefault(seg.id, [])
        start, window = 0, RUN_FIRST  # a run looks at twice the last one's records: O(records) whatever mix
        while start < len(records):
            taken = self._restore_unknown(seg, records[start : start + window], refused, to_order, now)
            if taken:
                start += taken
                window = min(max(RUN_FIRST, 2 * taken), MAX_RUN)
                continue
            record = records[start]
            named = RestoreRecord(*record)
            slot, gen, key, size = named.slot, named.gen, named.key, named.size
            start += 1
            known = self.objects.get(key)
            if tombs.covers(key, gen):  # removed since: its kill never reached the node
                tombs.refused += 1
                ok = False
            elif known is None:  # (a removal crowded out of the tombstones may have been this key's)
                ok = not self.fences.fencing(key) and not tombs.forgotten(key, gen)
            else:  # the same value, complete, without a replica here already
                ok = (
                    known.complete
                    and (known.size, known.checksum) == (size, named.checksum)
                    and all(r.segment is not seg for r in known.replicas)
                )
            replica = self.space.adopt(seg, key, named.offset, slot, gen, size) if ok else None
            if replica is None:
                refused.append(slot)
                continue
            self.counters.restored_replicas += 1
            if known is not None:
                if not known.replicas:
                    to_order.append((gen, key))  # on disk only until now
                self.ledger.apply([ReplicaRestored(key, replica)])
                continue
            meta = NewObject(
                key,
                size,
                named.checksum,
                [replica],
                seg.client_id,
                complete=True,
                pinned=named.pinned,
                last_access=now,
                base_replicas=min(named.replicas, self.config.max_replicas),
            )
            self.ledger.apply([ObjectRestored([meta])])
            self._pin([record])
            to_order.append((gen, key))
            self.counters.restored_objects += 1
        if last:
            self.space.end_restore(seg)
            restored = [key for _, key in sorted(self.order.pop(seg.id))]
            self.policy.on_insert_many(self.objects.table.in_memory(restored))
        return refused

    def _pin(self, restored: Iterable[NamedBack]) -> None:
        """The objects just restored from these records ask for the count their user set, when a record
        names one (its target: a node of the previous version names none), as on the master that set it."""
        most = self.config.max_replicas
        named = [r for r in restored if len(r) > _TARGET_AT and _TARGET(r)]
        pins = [ReplicaTargetSet(_KEY(r), min(_TARGET(r), most)) for r in named]
        if pins:
            self.ledger.apply(pins)

    def take_removed(self, removed: Sequence[tuple[str, int]]) -> None:
        """Removals an earlier master made while a node held the objects ([key, generation]: the node kept
        them, kvstore.node.catalog): what they cover is refused from now on, and an object taken back already
        from a node that never heard of its removal (every memory replica of a covered generation, no disk
        record: the master knows no generation of one) is removed again. Only an earlier master's removals
        are taken (a generation below this master's first), so what a node names can undo what nodes named
        back (as a restore always trusted them to), never an object put or copied through this master."""
        fences = self.fences
        tombs = fences.tombstones
        # One at or above this master's first generation is no earlier master's (or one whose clock ran
        # ahead): it would cover what this master hands out, so it is not taken.
        earlier = [(key, gen) for key, gen in removed if gen < fences.first]
        self.ledger.apply([TombstonesLearned(earlier, self.clock() + 2 * self.config.client_ttl)])
        for key, gen in earlier:
            meta = self.objects.get(key)
            if meta is None or not meta.complete or meta.disk is not None or not meta.replicas:
                continue
            if all(r.gen <= gen for r in meta.replicas):
                tombs.refused += len(meta.replicas)
                self._delete(meta)

    def _restore_unknown(
        self,
        seg: Segment,
        rest: Sequence[NamedBack],
        refused: list[int],
        to_order: list[tuple[int, str]],
        now: float,
    ) -> int:
        """Takes back the leading run of `rest` whose keys this master does not know (nor fences, nor removed,
        nor sees twice in the run): what a restarted master's table is made of, a batch at a time (one
        allocator call, one ledger record). Returns how many records it took or refused; 0 when the first is
        not one of those (restore_segment takes it alone)."""
        if _KEY(rest[0]) in self.objects:  # (a node back to a master that kept its table: cheap)
            return 0
        keys = list(map(_KEY, rest))
        n = self.objects.table.first_present(keys)
        fences = self.fences
        if fences.fencing_any():
            n = first_where(keys, n, fences.fencing)
        tombs = fences.tombstones
        if tombs.any() or tombs.floor:
            n = next((i for i, r in enumerate(rest[:n]) if _removed(tombs, _KEY(r), _GEN(r))), n)
        n = first_repeat(keys, n)
        if n == 0:
            return 0
        named = rest[:n]
        run = list(map(_AS_ADOPTED, named))
        taken = self.space.adopt_many(seg, run)
        adopted = list(itertools.compress(run, taken))
        refused += [_SLOT(r) for r, ok in zip(run, taken, strict=True) if not ok]
        if adopted:
            self.ledger.apply([ObjectsAdopted(seg, adopted, now, self.config.max_replicas)])
            self._pin(itertools.compress(named, taken))
            to_order += zip(map(_GEN, adopted), map(_KEY, adopted), strict=True)
            self.counters.restored_replicas += len(adopted)
            self.counters.restored_objects += len(adopted)
        return n

    def restore_disk(
        self,
        seg: DiskSegment,
        records: Sequence[tuple[int, str, int, int, int]],
        removed: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        """Takes back the records ([offset, key, size, checksum, generation], verified by the node) its disk
        `seg` still holds, after the removals its index remembers (`removed`: take_removed): each becomes a
        disk-only object, or the disk copy again of the same value still in memory elsewhere (another value
        of the key wins). One removed since (its tombstone covers the generation of the replica it was
        written from) is refused, and the node is told to forget it. Returns how many were taken."""
        if removed:
            self.take_removed(removed)
        disk = self.disk
        tombs = self.fences.tombstones
        now = self.clock()
        taken = 0
        dead: list[tuple[int, str]] = []
        for offset, key, size, checksum, gen in records:
            known = self.objects.get(key)
            if tombs.covers(key, gen) or (known is None and tombs.forgotten(key, gen)):
                dead.append((offset, key))
                continue
            if known is not None and (
                not known.complete
                or known.disk is not None
                or (known.size, known.checksum) != (size, checksum)
            ):
                continue  # another value of the key, or one with its own record
            record = disk.disk_space.take_back(seg, key, offset, size)
            if record is None:
                continue
            if known is not None:  # still in memory elsewhere: the record is its disk copy again
                self.ledger.apply([DiskRecordSet(key, record)])
            else:
                meta = NewObject(
                    key, size, checksum, [], seg.client_id, complete=True, last_access=now, disk=record
                )
                self.ledger.apply([ObjectRestored([meta])])
            disk.policy.on_insert(key, size)
            taken += 1
        if dead:
            tombs.refused += len(dead)
            disk.forget_records(seg, dead)
        disk.restored += taken
        return taken


def _removed(tombs: Tombstones, key: str, gen: int) -> bool:
    """An allocation of `key`, unknown to this master, in generation `gen` was removed since, or may have
    been (its tombstone crowded out)."""
    return tombs.covers(key, gen) or tombs.forgotten(key, gen)
