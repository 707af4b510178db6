"""A node's memory tier (kvstore.node.tiers.NodeTier): its segment of pre-faulted memory, which peers
read and write through the transfer engine in allocations the master carves and fences, and the catalog
of what it holds. It mounts the segment with the master (again after either restarts), naming back what
the catalog holds and its bytes still match; applies the master's kills and holds; and writes a replica
copy into itself from a peer, verified."""

from __future__ import annotations

import logging

import xxhash

from kvstore.cluster.session import Session
from kvstore.config import NodeConfig
from kvstore.errors import KVStoreError
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.segment_memory import ready_segment
from kvstore.rpc import messages as m
from transfer_engine import Op, Region, RequestState, TransferEngine

log = logging.getLogger("kvstore.node")

FENCE_DRAIN_SECONDS = 0.05  # how long a kill waits for copies admitted before it (else: retried)


def prepare_segment(engine: TransferEngine, config: NodeConfig, backing_file: str = "") -> Region:
    """The memory a node with `config` contributes, every page faulted in (kvstore.node.segment_memory);
    `backing_file`: in that shared-memory file (its bytes kept when it has the segment's size)."""
    size = config.segment_size
    return ready_segment(engine, size, fence_slots_for(size), config.pinned, backing_file)


def fence_slots_for(segment_size: int) -> int:
    """Fence table entries (48 bytes each) for a segment: one per 2 KiB (2% of it), so objects of
    2 KiB or more fill the segment before its allocations run out of slots."""
    return max(4096, min(segment_size // 2048, 1 << 26))


class MemoryTier:
    tier, name = m.MEMORY, "memory"

    def __init__(self, session: Session, segment: Region, catalog: SegmentCatalog) -> None:
        self.session = session
        self.segment = segment
        self.catalog = catalog
        self.kept = 0  # objects the last mount named back to the master and it took
        self.dropped = 0  # ... and those whose bytes no longer matched (never named back)

    def mount(self) -> None:
        """Offers the segment to the master (again, after the master or this node restarted), naming the
        objects it still holds (the catalog, each checked against its checksum). Every other allocation
        handed out before, by this master or an earlier one, is fenced off first, so a late writer or a
        reader with an old location cannot touch what the master now hands out afresh."""
        s = self.session
        before = len(self.catalog)
        held = self.catalog.verified(self.segment.array) if self.segment.array is not None else []
        self.dropped = before - len(held)
        self._fence_all_but(held)
        self._announce([(r.offset, r.slot, r.gen, r.size) for r in held])
        removed = self.catalog.removed()
        segment_id = s.master.call(
            m.MountSegment(
                client_id=s.client_id,
                engine=s.engine.name,
                region_id=self.segment.id,
                size=self.segment.length,
                host_id=s.host_id,
                fence_slots=fence_slots_for(self.segment.length),
                restoring=bool(held or removed),
            )
        )
        refused = self._name_back(segment_id, held, removed)
        self.kept = len(held) - refused
        if held:
            log.info("segment mounted with %d objects it held (%d refused)", self.kept, refused)

    def _name_back(self, segment_id: int, held: list[m.RestoreRecord], removed: list[m.Removal]) -> int:
        """Names to the master, in bounded chunks, the removals the catalog remembers (first: what they
        cover is refused whichever node names it), then what the segment holds; returns how many of those
        it refused."""
        step = m.FENCE_BATCH
        calls: list[tuple[list[m.RestoreRecord], list[m.Removal]]] = [
            ([], removed[i : i + step]) for i in range(0, len(removed), step)
        ]
        calls += [(held[i : i + step], []) for i in range(0, len(held), step)]
        refused = 0
        for n, (chunk, tombs) in enumerate(calls):
            request = m.RestoreSegment(
                client_id=self.session.client_id,
                segment_id=segment_id,
                records=chunk,
                last=n == len(calls) - 1,
                removed=tombs,
            )
            refused_slots = set(self.session.master.call(request))
            # Forgotten before the next chunk goes: a master that dies meanwhile (one refused them: they
            # were removed) leaves none of them to be named to the next one.
            refused += self._forget([(r.slot, r.gen) for r in chunk if r.slot in refused_slots])
        return refused

    def _forget(self, refused: list[tuple[int, int]]) -> int:
        """Fences off and forgets the (slot, gen) allocations the master refused; returns how many."""
        if refused:
            slots, gens = [r[0] for r in refused], [r[1] for r in refused]
            while not self.session.engine.kill_allocations(
                self.segment, slots, gens, timeout=FENCE_DRAIN_SECONDS
            ):
                log.warning("a peer's copy into the segment has not ended; waiting to fence it")
            self.catalog.drop(slots, gens)
        return len(refused)

    def _fence_all_but(self, held: list[m.RestoreRecord]) -> None:
        """Kills every allocation of the segment handed out so far but the `held` ones (each stays alive
        in its own generation only)."""
        s = self.session
        engine, segment = s.engine, self.segment
        if not held:
            while not engine.raise_fence_floor(segment, s.terms.generation, timeout=FENCE_DRAIN_SECONDS):
                log.warning("a peer's copy into the segment has not ended; waiting before mounting it")
            return
        # One pass in the engine: a large segment has tens of millions of slots. (A record of a slot past
        # the table, from a larger segment before, has nothing there to keep alive.)
        table = fence_slots_for(segment.length)
        inside = [r for r in held if r.slot < table]
        slots, gens = [r.slot for r in inside], [r.gen for r in inside]
        while not engine.kill_allocations_but(
            segment, s.terms.generation, slots, gens, timeout=FENCE_DRAIN_SECONDS
        ):
            log.warning("a peer's copy into the segment has not ended; waiting before mounting it")

    def apply_fences(self, orders: list[m.FenceOrder]) -> list[int]:
        """Applies the master's kills to the segment; returns the ids of those applied (to acknowledge)."""
        engine, applied = self.session.engine, []
        for order in orders:
            if order.region_id != self.segment.id:
                applied += order.kills  # a region gone since: nothing there to fence
            elif engine.kill_allocations(
                order.region_id, order.slots, order.gens, timeout=FENCE_DRAIN_SECONDS
            ):
                self.catalog.drop(order.slots, order.gens, order.buried)
                applied += order.kills
            # else a copy admitted before is still running (a stopped peer): the master keeps the space
            # and hands the kills out again
        return applied

    def hold(self, holds: list[m.HeldReplica]) -> None:
        mine = [h for h in holds if h.region_id == self.segment.id]
        # Announced first: a peer's transfer is admitted only into the allocation its slot was told to hold.
        self._announce([(h.offset, h.slot, h.gen, h.size) for h in mine])
        self.catalog.hold(mine)

    def _announce(self, allocations: list[tuple[int, int, int, int]]) -> None:
        """Names (offset, slot, gen, size) allocations of the segment to the engine's fences."""
        if allocations:
            offsets, slots, gens, sizes = zip(*allocations, strict=True)
            self.session.engine.announce_allocations(self.segment, slots, gens, offsets, sizes)

    def check(self, checks: list[m.ChecksumCheck]) -> list[tuple[int, bool]]:
        """(check, whether the allocation's bytes still match the checksum) for each: the master drops a
        replica a reader reported corrupt only on this node's word. One of another region, or outside the
        segment, is answered intact (a doubt never drops a replica)."""
        array, out = self.segment.array, []
        for c in checks:
            if array is None or c.region_id != self.segment.id or c.offset + c.size > array.size:
                out.append((c.check, True))
                continue
            digest = xxhash.xxh3_64_intdigest(array[c.offset : c.offset + c.size].data)
            out.append((c.check, digest == c.checksum))
        return out

    def copy_in(self, task: m.CopyTask) -> bool:
        """Writes a copy into this tier: reads the replica from its source into our allocation and
        verifies it (its checksum) before it is reported."""
        array = self.segment.array
        if array is None or not 0 <= task.offset <= self.segment.length - task.size:
            return False
        source = self.session.peer(task.source.engine)
        if source is None:
            return False
        engine = self.session.engine
        try:
            # The destination is ours: hold its allocation, so the master's kill of an expired task
            # waits for this copy rather than frees space under it.
            with engine.fenced(self.segment, task.slot, task.gen):
                state, _ = engine.transfer_one(
                    Op.READ,
                    self.segment.addr + task.offset,
                    source,
                    task.source.region_id,
                    task.source.offset,
                    task.size,
                    fence=(task.source.slot, task.source.gen),
                )
        except KVStoreError as exc:
            log.debug("replica copy %d failed: %s", task.task, exc)
            return False
        view = array[task.offset : task.offset + task.size]
        return state == RequestState.COMPLETED and xxhash.xxh3_64_intdigest(view.data) == task.checksum

    def close(self, forget: bool = False) -> None:
        """`forget`: the catalog's file goes too (the node leaves: its objects are not to be restored)."""
        self.catalog.close(remove=forget)
