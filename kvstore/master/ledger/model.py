"""The master's records: segments, replicas, clients and counters (data only; objects live in the C++ table:
kvstore.master.ledger.objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from kvstore.allocator import OffsetAllocator, SlotPool
from kvstore.rpc.records import DISK, MEMORY


@dataclass(eq=False)  # one object per mounted segment: equal only to itself (replicas compare by it)
class Segment:
    tier: ClassVar[int] = MEMORY
    id: int
    client_id: str
    engine: str  # the node's transfer engine, "host:port"
    region_id: int
    size: int
    host_id: str
    allocator: OffsetAllocator
    fence_slots: int  # entries of the node's fence table: one per live allocation
    allocations: int = 0  # carved here and not freed (the keys: Objects.keys_on, a walk of the table)
    suspect_since: float = 0.0  # a client could not reach it (0: trusted); its node's heartbeat clears it
    restoring: set[int] | None = None  # while its node names what it holds: the slots taken back so far
    slots: SlotPool = field(init=False)  # its fence slots (placement takes them in C++ too)

    def __post_init__(self) -> None:
        self.slots = SlotPool(self.fence_slots)

    @property
    def has_slot(self) -> bool:
        return self.slots.has_slot

    @property
    def usable(self) -> bool:
        return self.suspect_since == 0.0

    @property
    def placeable(self) -> bool:
        """New replicas may go here: usable, and not being restored."""
        return self.suspect_since == 0.0 and self.restoring is None


@dataclass(slots=True)  # one per replica of every object: no per-instance __dict__
class Replica:
    """A copy of an object in a memory segment: an allocation, fenced by (slot, gen)."""

    tier: ClassVar[int] = MEMORY
    segment: Segment
    offset: int
    slot: int  # in the node's fence table (kvstore.master.ledger.fences)
    gen: int  # the allocation's generation: transfers name (slot, gen); freeing kills it


@dataclass(eq=False)
class DiskSegment:
    """A node's disk file, as the master carves it (only that node reads and writes it)."""

    tier: ClassVar[int] = DISK
    id: int
    client_id: str
    host_id: str
    size: int
    allocator: OffsetAllocator
    allocations: int = 0  # records carved here and not freed
    degraded: str = ""  # why its writes fail (nothing is demoted to it meanwhile); "" while they work
    restoring: bool = False  # its node is offering back what it holds: nothing is demoted to it yet
    path: str = ""  # the file on its node's host (readers there read records directly); "" unknown
    engine: str = ""  # its node's engine, serving the file as region `file_region` (0: not served)
    file_region: int = 0


@dataclass(slots=True)
class DiskReplica:
    """A copy of an object on a node's disk: a record."""

    tier: ClassVar[int] = DISK
    segment: DiskSegment
    offset: int  # of the record: a header page, then the object's bytes


@dataclass
class Client:
    id: str
    host_id: str
    last_seen: float
    segments: set[int] = field(default_factory=set)
    node_id: str = ""  # a storage node's identity: a later registration with the same one supersedes this
    token: str = ""  # the process's secret for this registration: what it says in its own name carries it
    registration: int = 0  # this registration's number (RegisterReply.registration), random


@dataclass
class Counters:
    puts: int = 0
    put_bytes: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    evicted_bytes: int = 0
    evictions_to_disk: int = 0  # evictions that dropped only memory replicas: the object stayed on disk
    reclaimed_puts: int = 0
    incomplete_groups_dropped: int = 0  # groups missing a member too long, or first to go under pressure
    dropped_clients: int = 0
    superseded_clients: int = 0  # registrations of nodes that came back (restarted) under a new client id
    suspected_segments: int = 0  # segments clients reported unreachable
    corrupt_replicas: int = 0  # replicas dropped after a reader's checksum mismatch
    restored_replicas: int = 0  # replicas nodes named back after a restart (theirs or this master's)
    restored_objects: int = 0  # objects this master learned of that way
    stalls: int = 0  # times the master found it had not run for longer than a housekeeping period
    stalled_seconds: float = 0.0
