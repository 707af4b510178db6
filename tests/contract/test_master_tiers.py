"""One suite over every tier's space on the master (kvstore.master.tiers.TierSpace): a tier is done when
this passes on it. Each tier is taken from a real master state (`state.tiers`), so a new one is tested
here on arrival; mounting is the one tier-specific step (a segment's node says what it offers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kvstore.config import MasterConfig
from kvstore.master.ledger.changes import ObjectRestored
from kvstore.master.ledger.objects import NewObject
from kvstore.master.planners.tiers import TierSpace
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment

MiB = 1 << 20


def _mount_memory(state: MasterState, client: str, size: int, restoring: bool) -> Any:
    n = len(state.members.clients)
    state.members.register_client(client, f"h{n}")
    seg_id = state.members.mount_segment(
        MountSegment(client, f"127.0.0.1:{7000 + n}", 1, size, f"h{n}", 1 << 20, restoring=restoring)
    )
    return state.space.segments[seg_id]


def _mount_disk(state: MasterState, client: str, size: int, restoring: bool) -> Any:
    n = len(state.members.clients)
    state.members.register_client(client, f"h{n}")
    return state.disk.disk_space.mount(client, f"h{n}", size, f"/nvme/{client}", restoring=restoring)


Mount = Callable[[MasterState, str, int, bool], Any]
MOUNTS: dict[int, Mount] = {m.MEMORY: _mount_memory, m.DISK: _mount_disk}


def _space(state: MasterState, tier: int) -> TierSpace[Any, Any]:
    (space,) = [t for t in state.tiers if t.tier == tier]
    return space


@dataclass
class Tier:
    state: MasterState
    space: TierSpace[Any, Any]
    mount_one: Mount

    def mount(self, client: str, size: int, restoring: bool = False) -> Any:
        return self.mount_one(self.state, client, size, restoring)


@pytest.fixture(params=sorted(MOUNTS), ids=lambda t: {m.MEMORY: "memory", m.DISK: "disk"}[t])
def tier(request: pytest.FixtureRequest) -> Tier:
    state = MasterState(MasterConfig.load())
    assert {t.tier for t in state.tiers} == set(MOUNTS), "a tier without a mount in this suite"
    return Tier(state, _space(state, request.param), MOUNTS[request.param])


def test_capacity_counts_every_mounted_segment(tier: Tier) -> None:
    space, mount = tier.space, tier.mount
    assert space.capacity == 0 and space.used == 0 and not space.segments
    a, b = mount("a", 8 * MiB), mount("b", 4 * MiB)
    assert space.capacity == 12 * MiB and set(space.segments) == {a.id, b.id}
    assert space.mounted(a) and space.mounted(b)


def test_copies_are_carved_until_full_and_freeing_gives_the_space_back(tier: Tier) -> None:
    space, mount = tier.space, tier.mount
    seg = mount("a", 8 * MiB)
    copies: list[Any] = []
    while (copy := space.take(seg, f"k{len(copies)}", MiB - 8192)) is not None:
        copies.append(copy)
        assert len(copies) <= 8
    assert 4 <= len(copies) <= 8 and space.used <= space.capacity
    used = space.used
    space.free("k0", copies[0])
    assert space.used < used
    assert space.take(seg, "again", MiB - 8192) is not None  # the room is there again
    assert len({c.offset for c in copies}) == len(copies)  # never two copies in one place


def test_candidates_are_the_segments_that_can_hold_a_copy_emptiest_first(tier: Tier) -> None:
    """A full segment comes last, if at all: a tier that makes room on one segment by evicting its own
    copies (disk) lists it; one that evicts across segments and asks again (memory) does not."""
    space, mount = tier.space, tier.mount
    full, roomy, small = mount("a", 2 * MiB), mount("b", 8 * MiB), mount("c", 2 * MiB)
    while space.take(full, "x", MiB // 2) is not None:
        pass
    assert space.candidates(MiB) in ([roomy, small], [roomy, small, full])
    assert space.candidates(MiB, exclude=[roomy.id])[0] is small
    assert space.candidates(4 * MiB) == [roomy]  # too small for it: never listed


def test_a_segment_being_restored_takes_no_new_copies_until_its_restore_ends(tier: Tier) -> None:
    space, mount = tier.space, tier.mount
    seg = mount("a", 8 * MiB, restoring=True)
    assert space.candidates(MiB) == []
    space.end_restore(seg)
    assert space.candidates(MiB) == [seg]


def test_an_unmounted_segment_takes_nothing(tier: Tier) -> None:
    space, mount = tier.space, tier.mount
    seg = mount("a", 8 * MiB)
    tier.state.members.drop_client("a")
    assert not space.mounted(seg) and space.candidates(MiB) == [] and space.take(seg, "k", MiB) is None
    assert space.capacity == 0


def test_a_copy_is_found_where_it_was_carved_in_its_tier(tier: Tier) -> None:
    space, mount = tier.space, tier.mount
    seg = mount("a", 8 * MiB)
    copy = space.take(seg, "k", 4096)
    assert copy is not None
    here, away = space.location(copy, local=True), space.location(copy)
    assert here.tier == away.tier == space.tier
    assert here.host_id == away.host_id == seg.host_id
    assert here.offset >= copy.offset and away.offset == here.offset  # the object's bytes (after a header)


def test_status_describes_each_segment_with_its_tier_usage_and_health(tier: Tier) -> None:
    space, mount = tier.space, tier.mount
    seg = mount("a", 8 * MiB)
    space.take(seg, "k", MiB)
    row = space.describe(seg)
    assert row["tier"] == space.name and row["id"] == seg.id and row["size"] == 8 * MiB
    assert row["used"] >= MiB and row["objects"] == 1 and row["health"] == "ok"


def test_the_eviction_order_is_the_tiers_own_and_follows_use(tier: Tier) -> None:
    space = tier.space
    policy = space.policy
    assert [t.policy for t in tier.state.tiers].count(policy) == 1  # each tier orders its own copies
    for key in ("a", "b", "c"):  # (a tier orders objects of the master's table)
        tier.state.ledger.apply([ObjectRestored([NewObject(key, MiB, 1, [], "c0")])])
        policy.on_insert(key, MiB)
    policy.on_access("a")
    assert next(iter(policy.candidates())) == "b"
    policy.on_remove("b")
    assert "b" not in list(policy.candidates())
