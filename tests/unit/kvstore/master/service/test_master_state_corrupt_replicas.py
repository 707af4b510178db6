"""Master bookkeeping with a fake clock: a replica reported corrupt is checked by its node, then dropped
and replaced, or kept (moved from test_master_state.py, which had grown past 600 lines)."""

from __future__ import annotations

from kvstore.master.service.state import MasterState
from tests.unit.kvstore.master.state_helpers import Clock, MiB, clock, make_state, put

__all__ = ["clock"]  # (the fixture)


def _answer_checks(state: MasterState, client_id: str, intact: bool) -> int:
    """The node `client_id` answers every check queued for it (as its work channel would)."""
    checks = state.corrupt_checks.take(client_id, 100)
    for c in checks:
        state.removal.confirm_corrupt(client_id, c.check, intact)
    return len(checks)


def test_a_corrupt_replica_is_dropped_and_replaced_once_its_node_confirms(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB), ("h1", 8 * MiB)])
    placed = list(put(state, "k", replicas=2))  # a copy: the object's own list changes below
    meta = state.objects["k"]
    bad = placed[0]
    node = bad.segment.client_id
    where = (bad.segment.engine, bad.segment.region_id, bad.offset)
    state.removal.report_corrupt("k", *where, checksum=meta.checksum + 1)  # a stale reader: not this object
    assert state.corrupt_checks.pending() == 0
    used = state.space.used
    state.removal.report_corrupt(
        "k", *where, checksum=meta.checksum
    )  # a check for its node, nothing dropped yet
    state.removal.report_corrupt("k", *where, checksum=meta.checksum)  # (one check at a time per replica)
    assert len(meta.replicas) == 2 and state.corrupt_checks.pending() == 1
    assert _answer_checks(state, "c1" if node == "c0" else "c0", intact=False) == 0  # another node's: none
    assert _answer_checks(state, node, intact=True) == 1  # its bytes are fine: a forged report
    assert len(meta.replicas) == 2 and state.stats()["corrupt_reports_refuted"] == 1
    state.removal.report_corrupt("k", *where, checksum=meta.checksum)
    assert _answer_checks(state, node, intact=False) == 1  # they are not: dropped
    assert (
        meta.replicas == [placed[1]]
        and state.space.used == used - MiB
        and state.counters.corrupt_replicas == 1
    )
    state.replicator.plan()  # planned back up to the two replicas it was put with
    assert len(state.replicator.tasks) == 1
    other = placed[1]
    state.removal.report_corrupt(
        "k", other.segment.engine, other.segment.region_id, other.offset, meta.checksum
    )
    assert _answer_checks(state, other.segment.client_id, intact=False) == 1
    assert not state.core.exists("k") and "k" not in state.objects  # the last replica took the object with it


def test_a_check_not_answered_in_time_is_forgotten(clock: Clock) -> None:
    state = make_state(clock, [("h0", 8 * MiB)])
    (replica,) = put(state, "k")
    seg = replica.segment
    state.removal.report_corrupt("k", seg.engine, seg.region_id, replica.offset, state.objects["k"].checksum)
    clock.now += 31
    state.members.heartbeat(seg.client_id)  # (its node lives: only the check expires)
    state.expire()
    assert state.corrupt_checks.pending() == 0 and state.core.exists("k")  # a doubt never drops a replica
