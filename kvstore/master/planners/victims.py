"""Which object eviction takes next: a planner that reads the object table and proposes a victim; the
state applies the eviction (through the ledger). With a disk tier, objects that have a disk record go
first (evicting them loses nothing); a put that needs room waits for room on its way (RoomComing)
rather than lose an object a moment before a demotion gives it a disk record.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable

from kvstore.master.ledger.objects import ObjectMeta, Objects, TableOrder
from kvstore.master.planners.disk_tier import DiskTier
from kvstore.master.planners.eviction import EvictionPolicy, KeyOrder


class RoomComing(Exception):
    """Room for a put is on its way, so evicting now would lose an object for nothing: the object
    eviction would drop next is being demoted, or freed allocations wait for their node's fence (their
    slots return on its acknowledgement). Handlers defer the reply; `when_ready(callback)` runs it then."""

    def __init__(self, why: str, when_ready: Callable[[Callable[[], object]], None]) -> None:
        super().__init__(why)
        self.when_ready = when_ready


class VictimPlanner:
    def __init__(
        self,
        objects: Objects,
        policy: EvictionPolicy,
        order: KeyOrder,
        disk: DiskTier,
        clock: Callable[[], float],
        plan_demotions: Callable[[bool], None],
    ) -> None:
        """`plan_demotions(urgent)`: gives disk records to the next victims (the state's)."""
        self.objects = objects
        self.policy = policy
        self.order = order  # the policy's, first to go first
        self.disk = disk
        self.clock = clock
        self.plan_demotions = plan_demotions

    def choose(
        self, leased_too: bool = True, disk_backed_only: bool = False, wait_for_room: bool = False
    ) -> ObjectMeta | None:
        """The policy's first object not under a read lease; failing that (and with `leased_too`), its
        first leased one, fenced like a forced removal when evicted (a reader still on it gets a miss,
        never other bytes), so readers cannot starve writers. With a disk tier, objects with a disk record
        go first (only their memory replicas are dropped); `disk_backed_only` proposes nothing else (room
        for a load is never made by losing an object). With `wait_for_room`, raises RoomComing instead of
        proposing an object without a disk record while a demotion is in flight. None: nothing may go."""
        now = self.clock()
        victim = leased = None
        if self.disk.segments:
            # Objects with a disk record first: copies loaded for one read, oldest first; then the
            # coldest few of the policy's order (a victim a little less cold than the coldest is fine
            # when it saves an object; further up the order it would cost memory hits, as the hot set
            # has disk records too, demoted long ago).
            scan = 1024 if disk_backed_only else 64
            for keys in (self.disk.transient, itertools.islice(self.policy.candidates(), scan)):
                victim, held = self._pick(keys, now, disk_backed=True)
                leased = leased or held
                if victim is not None:
                    break
            if victim is None and leased_too:
                victim = leased  # a reader holding it gets STALE, asks again, and finds it on disk
        if victim is None and disk_backed_only:
            return None
        if victim is None:
            candidates = self.policy.candidates()  # (asked: an adaptive policy learns the cache is full)
            if isinstance(self.order, TableOrder):  # the master's: the walk is the table's, in C++
                free_key, held_key = self.order.first_victim(now)
                victim = None if free_key is None else self.objects[free_key]
                leased = None if held_key is None else self.objects[held_key]
            else:
                victim, leased = self._pick(candidates, now, disk_backed=False)
            victim = victim or (leased if leased_too else None)
        if victim is not None and wait_for_room and victim.disk is None and self.disk.working():
            self._wait_for_demotion(victim)
        return victim

    def _wait_for_demotion(self, victim: ObjectMeta) -> None:
        """Dropping `victim` loses it: raises RoomComing to wait for its demotion, or for any other one in
        flight (whose object can then go instead), or starts its own (planning had not reached it: puts
        outran the watermark's budget). Returns when no demotion can be waited for."""
        pending = victim.key if self.disk.demoting(victim.key) else self.disk.some_demotion()
        if pending is None and self.disk.demote_now(victim):
            pending = victim.key
            self.plan_demotions(True)  # and the next victims, as far as the disk queue allows
        if pending is not None:
            raise RoomComing("demotion", functools.partial(self.disk.when_demoted, pending))

    def _pick(
        self, keys: Iterable[str], now: float, disk_backed: bool
    ) -> tuple[ObjectMeta | None, ObjectMeta | None]:
        """The first of `keys` that may be evicted (committed, not pinned; with `disk_backed`, with a
        disk record and a memory copy to drop) and no reader holds; and the first such one a reader holds
        (a fallback: evicting it is fenced like a forced removal). One crossing into the table per key."""
        leased = None
        state = self.objects.victim_state
        for key in keys:
            may = state(key, now, disk_backed)
            if may == 1:
                return self.objects[key], leased
            if may == 2 and leased is None:
                leased = self.objects[key]
        return None, leased
