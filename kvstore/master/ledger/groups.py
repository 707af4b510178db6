"""Store groups: the objects of one block (its layers, KV cache groups, head slices), named
`<group>#<i>of<n>` (kvstore.blocks.member_key), possibly written by several processes, are one unit for
readers. The ledger keeps this index as it commits and drops objects: how many members of each group are
committed, and on each member's row whether readers see it (the table's `group` field: a lookup, an
existence check or a prefix match misses a member of a group missing some member). A lease on one member
is a lease on all (the table raises them together); eviction and removal take a group whole
(kvstore.master.service.removal). A group left incomplete (a writer died, a node was lost with a member) stays
invisible; it is the first to go under memory pressure once no member came for a put timeout, and goes
anyway after INCOMPLETE_PUT_TIMEOUTS put timeouts.
"""

from __future__ import annotations

from collections.abc import Callable

from kvstore.blocks import group_keys, group_of
from kvstore.master.ledger.objects import Objects

NOT_MEMBER, SHOWN, HIDDEN = 0, 1, 2  # the table's group states (csrc/meta/object_table.h)
INCOMPLETE_PUT_TIMEOUTS = 4  # an incomplete group outlives its last new member by at most this many

Group = tuple[str, int]  # (group key, member count): `g#0of2` and `g#0of3` are members of different groups


def group_id(key: str) -> Group | None:
    """The group a member key belongs to; None for any other key."""
    member = group_of(key)
    return None if member is None else (member[0], member[2])


def members(group: Group) -> list[str]:
    return group_keys(*group)


class GroupIndex:
    def __init__(self, objects: Objects, clock: Callable[[], float]) -> None:
        self._table = objects.table
        self._clock = clock
        self._committed: dict[Group, int] = {}  # members committed, of groups with at least one
        # Groups with some member committed but not all -> when a member last came or went, oldest first.
        self._incomplete: dict[Group, float] = {}

    def committed(self, keys: list[str]) -> tuple[list[str], list[str]]:
        """These keys (any form: only members count) were just committed. Marks them shown or hidden and
        returns the keys that became visible (every member of each group this completed) and those now
        hidden (the new members of groups still missing some)."""
        shown: list[str] = []
        hidden: list[str] = []
        now = self._clock()
        for key in keys:
            group = group_id(key)
            if group is None:
                continue
            count = self._committed[group] = self._committed.get(group, 0) + 1
            self._incomplete.pop(group, None)
            if count == group[1]:
                shown += members(group)
            else:
                self._incomplete[group] = now
                hidden.append(key)
        hidden = [key for key in hidden if group_id(key) in self._incomplete]  # (a later key completed it)
        if hidden:
            self._table.set_group_many(hidden, HIDDEN)
        if shown:
            self._table.set_group_many(shown, SHOWN)
        return shown, hidden

    def dropped(self, keys: list[str]) -> list[str]:
        """These committed members are about to leave the table: the rest of a group that was whole are
        hidden from now on (returned: the members of those groups)."""
        hidden: list[str] = []
        now = self._clock()
        for key in keys:
            group = group_id(key)
            count = self._committed.get(group, 0) if group is not None else 0
            if group is None or count == 0:
                continue
            if count == group[1]:
                hidden += members(group)
            if count == 1:
                del self._committed[group]
                self._incomplete.pop(group, None)
            else:
                self._committed[group] = count - 1
                self._incomplete.pop(group, None)
                self._incomplete[group] = now
        if hidden:
            self._table.set_group_many(hidden, HIDDEN)
        return hidden

    def forget(self, group: Group) -> None:
        """Stops counting a group none of whose members is in the table."""
        self._committed.pop(group, None)
        self._incomplete.pop(group, None)

    def complete(self, group: Group) -> bool:
        return self._committed.get(group, 0) == group[1]

    def stale(self, before: float) -> list[Group]:
        """The incomplete groups no member came to or left since `before`, oldest first."""
        out = []
        for group, since in self._incomplete.items():
            if since >= before:
                break
            out.append(group)
        return out

    def incomplete(self) -> int:
        return len(self._incomplete)

    def __len__(self) -> int:
        return len(self._committed)
