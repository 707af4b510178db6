"""Segment space: where replicas go inside segments. Mounting, choosing segments for puts and replica
copies alike (distinct segments, distinct hosts first, the roomier of two drawn at random among those that
fit: a segment that joins a full cluster is not flooded with every write) and freeing are asked here;
the ledger (kvstore.master.ledger.ledger) records each change and carves the space (SegmentMounted,
SpaceTaken, SpaceFreed, ...). The rest of the master never touches an allocator or a segment's key
index itself."""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from kvstore.allocator import OffsetAllocator
from kvstore.errors import InvalidArgumentError, NotEnoughSegmentsError
from kvstore.master.ledger.changes import (
    ReplicaAdded,
    ReplicaTargetSet,
    SegmentDropped,
    SegmentMounted,
    SegmentSuspected,
)
from kvstore.master.ledger.holds import HoldBook
from kvstore.master.ledger.ledger import Carved, Ledger
from kvstore.master.ledger.locations import memory_location
from kvstore.master.ledger.model import Replica, Segment
from kvstore.master.ledger.node_polls import NodePolls
from kvstore.master.planners.eviction import EvictionPolicy
from kvstore.rpc import messages as m

_new_tuple = tuple.__new__  # (builds a NamedTuple in one C call: a PutStart reply builds thousands)
# Where each field of a Placement comes from on a Replica, by name. The getter reads them in Placement's
# declared order (one C call per replica): a field added to either side without the other fails at import.
PLACEMENT_SOURCES = {
    "engine": "segment.engine",
    "region_id": "segment.region_id",
    "offset": "offset",
    "slot": "slot",
    "gen": "gen",
}
if set(PLACEMENT_SOURCES) != set(m.Placement._fields):
    raise TypeError(f"PLACEMENT_SOURCES names {sorted(PLACEMENT_SOURCES)}, Placement {m.Placement._fields}")
placement_fields = operator.attrgetter(*[PLACEMENT_SOURCES[name] for name in m.Placement._fields])


def placement_of(replica: Replica) -> m.Placement:
    """Where a replica lives, as the wire names it for whoever reads or writes it."""
    return _new_tuple(m.Placement, placement_fields(replica))


class SegmentSpace:
    """The memory tier (kvstore.master.planners.tiers.TierSpace)."""

    tier, name = m.MEMORY, "memory"

    def __init__(
        self,
        alignment: int,
        clock: Callable[[], float],
        ledger: Ledger,
        polls: NodePolls,
        policy: EvictionPolicy,
    ) -> None:
        """`ledger`: the master state's, which records and carves; `polls`: each node's one work poll
        (whoever queues work for a node wakes it); `policy`: the order memory replicas are evicted in."""
        self.alignment = alignment
        self.policy = policy
        self.ledger = ledger
        self.polls = polls
        self.fences = ledger.fences  # read here; issued and acknowledged by the ledger
        # nodes are told what they hold on their work channel
        self.holds = HoldBook(self.polls.wake, clock, ledger.objects)
        self.segments: Mapping[int, Segment] = self.ledger.segments  # written by the ledger only
        self._next = 1
        self._slot_waiters: dict[str, list[Callable[[], object]]] = {}  # puts waiting for slots, by node
        # What the nodes are told they hold follows the records here only: a put's replicas are told as
        # they are placed (Puts), a copy once it landed, and every replica again when a user sets a count.
        ledger.watch(ReplicaAdded, self._hold_added)
        ledger.watch(ReplicaTargetSet, self._retell_holds)

    def _hold_added(self, records: list[ReplicaAdded]) -> None:
        """A copy that landed is told to its node (kvstore.master.ledger.holds)."""
        objects = self.ledger.objects
        for r in records:
            meta = objects[r.key]
            if meta.complete:
                self.holds.hold_all(meta, [r.replica])

    def _retell_holds(self, records: list[ReplicaTargetSet]) -> None:
        """A replica count set by a user is told to the nodes with the object's holds (each replica's is
        sent again carrying it), so the master that takes over from this one restores it."""
        for r in records:
            meta = self.ledger.objects.get(r.key)
            if meta is not None and meta.complete and meta.replicas:
                self.holds.hold_all(meta, meta.replicas)

    # -- segments -------------------------------------------------------------------------------------
    def mount(
        self,
        client_id: str,
        engine: str,
        region_id: int,
        size: int,
        host_id: str,
        fence_slots: int = 1 << 20,
        restoring: bool = False,
    ) -> Segment:
        """A new segment; `restoring`: nothing is placed on it until end_restore (its node names the
        replicas it still holds first: adopt)."""
        for seg in self.segments.values():
            if seg.engine == engine and seg.region_id == region_id:
                raise InvalidArgumentError(f"region {region_id} of {engine} is already mounted")
        seg = Segment(
            self._next,
            client_id,
            engine,
            region_id,
            size,
            host_id,
            OffsetAllocator(size, self.alignment),
            fence_slots,
            restoring=set() if restoring else None,
        )
        self._next += 1
        self.ledger.apply([SegmentMounted(seg)])
        return seg

    def adopt(
        self, segment: Segment, key: str, offset: int, slot: int, gen: int, size: int
    ) -> Replica | None:
        """Takes back an allocation the segment's node still holds (the segment is being restored):
        exactly [offset, offset + size) and its fence slot. None when either is not free."""
        return self.ledger.take_back(segment, key, offset, slot, gen, size)

    def adopt_many(
        self, segment: Segment, records: list[tuple[int, int, int, str, int, int, bool, int]]
    ) -> list[bool]:
        """adopt of each record a node names (RestoreSegment's), in order: per record whether it was."""
        return self.ledger.take_back_many(segment, records)

    def end_restore(self, segment: Segment) -> None:
        """Its node named everything it holds: the slots it did not name are free, and placing begins."""
        self.ledger.end_restore(segment)

    def mounted(self, segment: Segment) -> bool:
        return self.segments.get(segment.id) is segment

    def unmount(self, segment: Segment) -> list[str]:
        """Forgets a segment (its space goes with it); returns the keys that had a replica there."""
        self.trust(segment)
        self.ledger.apply([SegmentDropped(segment)])
        self.holds.drop_region(segment.client_id, segment.region_id)
        return self.ledger.objects.keys_on(segment)

    @property
    def capacity(self) -> int:
        """Bytes of all mounted segments (the ledger keeps the sum as they mount and go: puts check it)."""
        return self.ledger.memory_capacity

    @property
    def fence_slots(self) -> int:
        """Allocation slots of all mounted segments (likewise)."""
        return self.ledger.memory_fence_slots

    def any_suspect(self) -> bool:
        """True while some segment is suspected unreachable (O(1), the ledger's count: the hot paths skip
        the check)."""
        return self.ledger.suspects > 0

    def suspect(self, segment: Segment, now: float) -> bool:
        """Marks a segment suspected unreachable; False if it already was, or is not mounted."""
        if not segment.usable or not self.mounted(segment):
            return False
        self.ledger.apply([SegmentSuspected(segment, now)])
        return True

    def trust(self, segment: Segment) -> None:
        """Its node proved alive: the segment is usable again."""
        if not segment.usable:
            self.ledger.apply([SegmentSuspected(segment, 0.0)])

    def __iter__(self) -> Iterator[Segment]:
        return iter(self.segments.values())

    def __len__(self) -> int:
        return len(self.segments)

    # -- space ----------------------------------------------------------------------------------------
    def usable_for(self, size: int) -> int:
        """How many distinct usable segments could hold `size` bytes (evicting if need be)."""
        return sum(1 for s in self.segments.values() if s.size >= size and s.placeable)

    def check_fits(self, size: int, count: int) -> None:
        """Raises NotEnoughSegmentsError when `count` replicas of `size` bytes cannot be placed on distinct
        usable segments, whatever is evicted (the cause is named: too few, too small, suspected)."""
        if size <= 0:
            raise InvalidArgumentError("size must be positive")
        usable = 0
        for s in self.segments.values():  # the put path: stop as soon as enough are found
            if s.size >= size and s.suspect_since == 0.0 and s.restoring is None:  # placeable, inlined
                usable += 1
                if usable >= count:
                    return
        large = [s for s in self.segments.values() if s.size >= size]
        usable = sum(1 for s in large if s.placeable)
        if usable < count:
            restoring = sum(1 for s in large if s.restoring is not None)
            raise NotEnoughSegmentsError(
                f"{count} replicas of {size} bytes need {count} distinct segments that can hold them; "
                f"{usable} usable of {len(self.segments)} mounted ({len(self.segments) - len(large)} too "
                f"small, {sum(1 for s in large if not s.usable)} suspected unreachable by a client, "
                f"{restoring} being restored by their node)"
            )

    def place(
        self,
        key: str,
        size: int,
        count: int,
        *,
        exclude: Collection[int] = (),
        spread_from: Collection[str] = (),
    ) -> list[Replica] | None:
        """Allocates `count` replicas of `key` on distinct usable segments (none in `exclude`, none suspected
        unreachable), on hosts other than `spread_from` and each other first, each on the roomier (larger
        share of its capacity free) of two segments drawn at random, in proportion to capacity, among those
        that fit. None, and nothing allocated, when they do not fit now (the caller may evict and try
        again). The rule runs in C++ (csrc/meta/memory_space), carving as it goes (through the ledger)."""
        return self.ledger.place(key, size, count, list(exclude), list(spread_from))

    def place_many(self, keys: list[str], sizes: list[int], count: int) -> Carved:
        """`place` for each key in turn (no exclusions), in one call: `count` replicas per key placed
        (with their columns); the keys placed stop before the first that does not fit now."""
        return self.ledger.place_many(keys, sizes, count)

    def candidates(self, size: int, exclude: Collection[int] = ()) -> list[Segment]:
        fits = [
            (free, s)
            for s in self.segments.values()
            if s.placeable
            and s.id not in exclude
            and s.has_slot
            and (free := s.allocator.largest_free) >= size
        ]
        return [s for _, s in sorted(fits, key=_first, reverse=True)]

    def take(self, segment: Segment, key: str, size: int) -> Replica | None:
        if not segment.has_slot or segment.allocator.largest_free < size or not self.mounted(segment):
            return None
        return self.ledger.take(segment, key, size)

    def free(self, key: str, copy: Replica, *, hold: bool = False, read_until: float = 0.0) -> None:
        """Gives a replica's allocation back and has its node fence it off (Ledger.free: `hold` keeps its
        space until the node acknowledges, for a writer that may be late; `read_until` keeps the key
        fencing while readers may hold its location). A hold of it not yet sent is not sent: a node never
        learns of a replica after its kill."""
        seg = copy.segment
        self.holds.cancel(seg.client_id, seg.region_id, copy.slot, copy.gen)
        self.ledger.free(key, copy, hold=hold, read_until=read_until)

    def free_many(self, copies: Sequence[tuple[str, Replica, float]]) -> None:
        """free() of each (key, replica, read_until), none held for a writer (finished objects'): the holds
        cancelled in one pass, each node's waiting puts checked once (HoldBook.cancel_many)."""
        self.holds.cancel_many(
            [(c.segment.client_id, c.segment.region_id, c.slot, c.gen) for _, c, _ in copies]
        )
        free = self.ledger.free
        for key, copy, read_until in copies:
            free(key, copy, read_until=read_until)

    def location(self, copy: Replica, local: bool = False) -> m.Location:
        return memory_location(copy)

    def describe(self, segment: Segment) -> dict[str, Any]:
        health = "restoring" if segment.restoring is not None else "ok" if segment.usable else "suspect"
        return {
            "tier": self.name,
            "id": segment.id,
            "engine": segment.engine,
            "region": segment.region_id,
            "size": segment.size,
            "used": segment.allocator.used,
            "objects": segment.allocations,
            "health": health,
        }

    def acknowledge(self, client_id: str, kill_ids: list[int]) -> None:
        """A node applied these kills (Ledger.acknowledge); puts waiting for its slots go on."""
        self.ledger.acknowledge(client_id, kill_ids)
        if kill_ids:
            for waiter in self._slot_waiters.pop(client_id, []):
                waiter()

    def awaiting_slots(self, size: int) -> list[str]:
        """Nodes with a usable segment that has room for `size` bytes but no free allocation slot, while
        fences of freed allocations are in flight there (their slots return on acknowledgement)."""
        return [
            s.client_id
            for s in self.segments.values()
            if s.usable
            and not s.has_slot
            and s.allocator.largest_free >= size
            and self.fences.outstanding(s.client_id)
        ]

    def when_slots_return(self, client_ids: Collection[str], waiter: Callable[[], object]) -> None:
        """Runs `waiter` once one of these nodes acknowledges fences (slots come back)."""
        for client_id in client_ids:
            self._slot_waiters.setdefault(client_id, []).append(waiter)

    @property
    def used(self) -> int:
        """Bytes allocated in all segments (the allocators are the one record of it)."""
        return sum(s.allocator.used for s in self.segments.values())


def _first(pair: tuple[int, Segment]) -> int:
    return pair[0]
