"""The tiers a copy of an object lives in, as the master sees them: memory segments (SegmentSpace) and
node disks (DiskSpace); GPU memory would be one more. Each tier's space answers the same questions: what
it holds (capacity, used), where a new copy of `size` bytes may go now (placement order), carving a copy
and giving it back (through the ledger, the one writer), the order its copies are evicted in, how a
reader finds a copy (one Location record for every tier), and how a segment shows in `kvstore status`.
tests/contract/test_master_tiers.py runs one suite over every tier.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol, TypeVar

from kvstore.master.planners.eviction import EvictionPolicy
from kvstore.rpc import messages as m

SegmentT = TypeVar("SegmentT")
CopyT = TypeVar("CopyT")


class TierSpace(Protocol[SegmentT, CopyT]):
    tier: int  # Location.tier of its copies: m.MEMORY | m.DISK
    name: str  # as `kvstore status` shows it
    policy: EvictionPolicy  # the order this tier's copies are evicted in

    @property
    def segments(self) -> Mapping[int, SegmentT]: ...

    @property
    def capacity(self) -> int: ...

    @property
    def used(self) -> int: ...

    def mounted(self, segment: SegmentT) -> bool: ...

    def end_restore(self, segment: SegmentT) -> None:
        """Its node named back everything it holds: copies may be placed on it."""

    def candidates(self, size: int, exclude: Collection[int] = ()) -> list[SegmentT]:
        """The segments a copy of `size` bytes may go to (none in `exclude`; usable, not being restored,
        large enough), the emptiest first. A full one is listed last by a tier that makes room on a
        segment by evicting its own copies there (disk), and not at all by one whose eviction runs
        across segments, after which the caller asks again (memory)."""

    def take(self, segment: SegmentT, key: str, size: int) -> CopyT | None:
        """Carves a copy of `size` bytes of `key` on `segment`; None when it does not fit there now."""

    def free(self, key: str, copy: CopyT, *, hold: bool = False) -> None:
        """`key` gives the copy up; `hold`: a writer may still be writing into it, so its space is reused
        only once that cannot happen any more."""

    def location(self, copy: CopyT, local: bool = False) -> m.Location:
        """Where a reader finds the copy; `local`: the reader is on the copy's host."""

    def describe(self, segment: SegmentT) -> dict[str, Any]:
        """The segment as `kvstore status` shows it: tier, id, size, used, objects, health, ..."""
