"""The typed changes to the master's tables: one record per change, applied by kvstore.master.ledger.ledger
(the one writer) and seen by whoever watches them (the nodes' holds; a journal or standby when one listens).

Object and segment records are applied as they are (Ledger.apply). Space records report what the ledger
carved or gave back inside a segment of any tier (the allocator picks the offset as it carves, so the
ledger's own methods make them as they apply them: Ledger.take, Ledger.free, ...); fence records report
the kills queued for nodes and the ones they acknowledged. Every record applies: Ledger.apply of a run's
records, in order, to an empty ledger makes the same objects, space, slots and kills (a journal or a
standby replays them so; tests/unit/kvstore/master/ledger/test_ledger_replay.py).

The records name the durable state: what a master that takes over must have, and rebuilds from what the
nodes' holds carry (the objects, their replicas, sizes, checksums, pins and the count each asks for) and
what nodes and disks name back. A read's state is soft: the ledger writes it too, by its use methods
(Ledger.use, Ledger.locate_many, Ledger.loaded) under the one read rule (csrc/meta/object_use), with no
record, as it changes on every read; a failover drops it:
- lease_until: a new master rebuilds every object unleased, so it may evict or remove one whose location a
  reader still holds from the master before; the node's fence refuses that read of the freed allocation
  (a miss, never other bytes).
- heat, last_access, access_count: cold (no heat, last used when restored, no reads counted); a hot object
  is hot again after its next reads.
- loaded_at: none; the first read from disk after the failover starts a new promote window.
- hold_seq (set by kvstore.master.ledger.holds as a put is placed): numbers a put's holds in this master's
  sequence, so the put's end waits for its nodes. A new master starts its own sequence and knows no put in
  flight at the failover: its end is refused; a replica whose bytes all landed comes back through its
  node's hold, a late write to any other is fenced off by generation.
"""

from __future__ import annotations

from typing import NamedTuple

from kvstore.master.ledger.fences import Kill
from kvstore.master.ledger.model import DiskReplica, DiskSegment, Replica, Segment
from kvstore.master.ledger.objects import NewObject


class SegmentMounted(NamedTuple):
    """A node contributed a segment of a tier: memory (Segment) or a disk (DiskSegment)."""

    segment: Segment | DiskSegment


class SegmentDropped(NamedTuple):
    """The segment is gone (unmounted, or its node dropped); its replicas were dropped first."""

    segment: Segment | DiskSegment


class PutsStarted(NamedTuple):
    """One writer's puts placed their replicas, a batch of them (one record per run of a PutStart request
    placed together, or per put started alone); each object is invisible until PutsCommitted. Columns, no
    object per key: key i's copies are [i * copies_each, (i + 1) * copies_each) of the copy columns
    (segment ids, offsets, slots, generations). Their holds are told to their nodes once they are
    recorded (each row's hold_seq is the holds', as it is soft: see above)."""

    keys: list[str]
    sizes: list[int]
    checksums: list[int]
    copies_each: int
    segment_ids: list[int]
    offsets: list[int]
    slots: list[int]
    gens: list[int]
    writer: str
    pinned: bool
    base_replicas: int  # the replicas the puts asked for (a degraded object is repaired up to it)
    started: float  # their last access
    put_deadline: float  # when they are reclaimed unless ended (less any stall the master credits them)


class PutsCommitted(NamedTuple):
    """Puts made visible, a batch of them (one record per PutEnd: no object per key on the put path)."""

    keys: list[str]


class ObjectDropped(NamedTuple):
    """Removed, evicted, reclaimed or lost with its last replica: gone from the table."""

    key: str


class ObjectsBuried(NamedTuple):
    """Tombstones: `keys` were removed (or `evicted`) while `gen` was the newest generation handed out; a
    node that did not hear of it cannot bring them back by naming them to a restore until `until`
    (kvstore.master.ledger.tombstones). Made before the objects are dropped."""

    keys: list[str]
    gen: int
    until: float
    evicted: bool


class ObjectsLost(NamedTuple):
    """`keys` went with their segment, not removed: what their node names back is taken until `until`."""

    keys: list[str]
    until: float


class TombstonesLearned(NamedTuple):
    """Removals an earlier master made, as a node remembers them ([key, generation]), kept until `until`."""

    tombs: list[tuple[str, int]]
    until: float


class GroupsShown(NamedTuple):
    """Derived, made by the ledger: these group members (kvstore.master.ledger.groups) became visible to
    readers at once, as the last of their group was committed or restored (watchers that report what readers
    can find count them from here, not from PutsCommitted). Applying one changes nothing."""

    keys: list[str]


class GroupsHidden(NamedTuple):
    """Derived, made by the ledger: these group members are no longer visible (a member of their group
    is being dropped, or was committed into a group still missing some). Applying one changes nothing."""

    keys: list[str]


class ReplicaAdded(NamedTuple):
    """A copy landed (replication, or a load from disk): the object has one more memory replica."""

    key: str
    replica: Replica


class ReplicaDropped(NamedTuple):
    key: str
    replica: Replica


class ObjectRestored(NamedTuple):
    """Nodes named objects this master did not know (after a restart or a failover), a batch of them (one
    record per request that named them): committed."""

    metas: list[NewObject]


class ObjectsAdopted(NamedTuple):
    """Nodes named objects this master did not know, each with its one replica on `segment`, a batch of
    them: the records as RestoreSegment names them (offset, slot, gen, key, size, checksum, pinned,
    replicas), no object per record. Committed, last used at `last_access`, asking for at most
    `most_replicas` replicas."""

    segment: Segment
    records: list[tuple[int, int, int, str, int, int, bool, int]]
    last_access: float
    most_replicas: int


class ReplicaRestored(NamedTuple):
    """A node named a replica of an object this master knows."""

    key: str
    replica: Replica


class DiskRecordSet(NamedTuple):
    """The object has a disk record now (demoted, or a restarted node offered it back)."""

    key: str
    record: DiskReplica


class DiskRecordDropped(NamedTuple):
    key: str


class ReplicaTargetSet(NamedTuple):
    """A user asked for exactly `replicas` copies of the object (change_replica; 0: its heat decides
    again). Durable: its nodes are told it with their holds, so a master that takes over keeps it."""

    key: str
    replicas: int


class SegmentSuspected(NamedTuple):
    """A client could not reach the memory segment's node since `since` (nothing new is placed on it),
    or its node proved alive (`since` 0.0: trusted again)."""

    segment: Segment
    since: float


class DiskDegraded(NamedTuple):
    """The disk's writes fail (`reason`: nothing is demoted to it), or work again (reason "")."""

    segment: DiskSegment
    reason: str


class RestoreEnded(NamedTuple):
    """The segment's node named back everything it holds: what it did not name is free, placing begins."""

    segment: Segment | DiskSegment


class SpaceTaken(NamedTuple):
    """Space carved for `key` in a segment: a memory allocation with its fence slot and generation (a
    put's, a copy's, a load's, or one a restarted node named back), or a disk record, of `size` bytes
    (as asked: the allocator rounds it up the same way when the record is applied elsewhere)."""

    key: str
    replica: Replica | DiskReplica
    size: int


class SpaceFreed(NamedTuple):
    """`key` gave the space up. A memory allocation's node is sent `kill` (its space stays taken until
    the node acknowledges it when a writer may be late); a disk record's space is `held` until its late
    write cannot land any more (then SpaceReleased)."""

    key: str
    replica: Replica | DiskReplica
    kill: Kill | None
    held: bool


class SpaceReleased(NamedTuple):
    """A disk record's held space is free again."""

    replica: DiskReplica


class FencesAcknowledged(NamedTuple):
    """The node applied these kills: their slots, and space held for late writers, are free again."""

    client_id: str
    kills: list[Kill]


Record = (
    SegmentMounted
    | SegmentDropped
    | PutsStarted
    | PutsCommitted
    | ObjectDropped
    | ObjectsBuried
    | ObjectsLost
    | TombstonesLearned
    | GroupsShown
    | GroupsHidden
    | ReplicaAdded
    | ReplicaDropped
    | ObjectRestored
    | ObjectsAdopted
    | ReplicaRestored
    | ReplicaTargetSet
    | DiskRecordSet
    | DiskRecordDropped
    | RestoreEnded
    | SegmentSuspected
    | DiskDegraded
    | SpaceTaken
    | SpaceFreed
    | SpaceReleased
    | FencesAcknowledged
)
