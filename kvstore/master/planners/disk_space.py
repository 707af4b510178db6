"""The disk tier's space (kvstore.master.planners.tiers.TierSpace), as SegmentSpace is memory's: node disks,
carved into records (a header page, then the object's bytes; 4 KiB aligned for direct I/O). Only a
disk's own node reads and writes it, so no fences. The ledger records and carves."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from kvstore.allocator import OffsetAllocator
from kvstore.errors import InvalidArgumentError
from kvstore.master.ledger.changes import SegmentDropped, SegmentMounted
from kvstore.master.ledger.ledger import Ledger
from kvstore.master.ledger.locations import disk_location
from kvstore.master.ledger.model import DiskReplica, DiskSegment
from kvstore.master.planners.eviction import EvictionPolicy
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import PAGE, record_bytes


class DiskSpace:
    tier, name = m.DISK, "disk"

    def __init__(self, ledger: Ledger, policy: EvictionPolicy) -> None:
        """`policy`: the order disk records are evicted in (to make room for demotions)."""
        self.ledger = ledger
        self.policy = policy
        self.segments: Mapping[int, DiskSegment] = ledger.disks  # written by the ledger only
        self._next = 1

    def mount(
        self,
        client_id: str,
        host_id: str,
        size: int,
        path: str = "",
        engine: str = "",
        file_region: int = 0,
        restoring: bool = False,
    ) -> DiskSegment:
        """A node's disk (one per client). `restoring`: nothing is demoted to it until its node has
        offered back its records (a demotion planned meanwhile would take the space of a record about to
        be offered)."""
        if any(s.client_id == client_id for s in self.segments.values()):
            raise InvalidArgumentError(f"client {client_id} already mounted a disk")
        seg = DiskSegment(
            self._next,
            client_id,
            host_id,
            size,
            OffsetAllocator(size, PAGE),
            path=path,
            engine=engine,
            file_region=file_region,
            restoring=restoring,
        )
        self._next += 1
        self.ledger.apply([SegmentMounted(seg)])
        return seg

    def unmount(self, segment: DiskSegment) -> None:
        self.ledger.apply([SegmentDropped(segment)])

    def end_restore(self, segment: DiskSegment) -> None:
        self.ledger.end_restore(segment)

    def mounted(self, segment: DiskSegment) -> bool:
        return self.segments.get(segment.id) is segment

    def candidates(self, size: int, exclude: Collection[int] = ()) -> list[DiskSegment]:
        """Disks that could hold a record of a `size`-byte object (evicting their records if need be:
        the disk tier makes room), working and not being restored, the emptiest first."""
        need = record_bytes(size)
        fits = [
            s
            for s in self.segments.values()
            if s.id not in exclude and s.size >= need and not s.degraded and not s.restoring
        ]
        return sorted(fits, key=lambda s: -s.allocator.largest_free)

    def take(self, segment: DiskSegment, key: str, size: int) -> DiskReplica | None:
        """A record for a `size`-byte object; None when the disk has no room for it now."""
        if not self.mounted(segment):
            return None
        return self.ledger.take_disk(segment, key, record_bytes(size))

    def take_back(self, segment: DiskSegment, key: str, offset: int, size: int) -> DiskReplica | None:
        """Takes exactly the record at `offset` of a `size`-byte object a restarted node still holds;
        None if that space is not free."""
        return self.ledger.take_back_disk(segment, key, offset, record_bytes(size))

    def free(self, key: str, copy: DiskReplica, *, hold: bool = False) -> None:
        """The record no longer holds `key`; its space is free again, unless `hold` (a late write may still
        land there: release() it once that cannot happen)."""
        self.ledger.free_disk(key, copy, hold=hold)

    def release(self, record: DiskReplica) -> None:
        self.ledger.release_disk(record)

    def location(self, copy: DiskReplica, local: bool = False) -> m.Location:
        return disk_location(copy, local)

    def describe(self, segment: DiskSegment) -> dict[str, Any]:
        return {
            "tier": self.name,
            "id": segment.id,
            "engine": segment.engine,
            "path": segment.path,
            "size": segment.size,
            "used": segment.allocator.used,
            "objects": segment.allocations,
            "health": "degraded" if segment.degraded else "ok",
            "degraded": segment.degraded,
        }

    @property
    def capacity(self) -> int:
        return sum(s.size for s in self.segments.values())

    @property
    def used(self) -> int:
        return sum(s.allocator.used for s in self.segments.values())
