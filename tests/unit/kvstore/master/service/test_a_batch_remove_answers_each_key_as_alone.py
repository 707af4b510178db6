"""A remove request of many keys is one batch (Removal.remove_many): each key is checked as if the ones
before it were gone (a group's second member, a key named twice: not found; leased without force: busy;
another's leased one forced by a non-admin: refused), then the removable ones go together. Each key's
answer and the master's end state are those of remove() called key by key, as the handler did."""

from __future__ import annotations

import pytest

from kvstore.blocks import group_keys
from kvstore.errors import KVStoreError
from kvstore.master.service.state import MasterState
from tests.unit.kvstore.master.service.test_a_batch_removal_ends_as_one_at_a_time import (
    _end_state,
    _fill,
    _state,
)


def _one_by_one(
    state: MasterState, keys: list[str], force: bool, by: str | None
) -> list[tuple[int, str] | None]:
    out: list[tuple[int, str] | None] = []
    for key in keys:
        try:
            state.removal.remove(key, force, by)
        except KVStoreError as exc:
            out.append((exc.code, str(exc)))
        else:
            out.append(None)
    return out


def _batch(state: MasterState, keys: list[str], force: bool, by: str | None) -> list[tuple[int, str] | None]:
    return [None if e is None else (e.code, str(e)) for e in state.removal.remove_many(keys, force, by)]


def _others(state: MasterState) -> None:
    """Objects another client (c1) wrote, leased to a reader."""
    for i in range(6):
        state.puts.put_start("c1", f"theirs{i}", 64 * 1024, 3, 1, False)
        state.puts.put_end("c1", f"theirs{i}")
        state.access.get_replicas(f"theirs{i}")


KEYS = [
    *[f"k{i}" for i in range(0, 300, 7)],  # every 12th of them leased (k0, k84, k168, k252: busy unforced)
    "k7",  # named twice: the second is not found
    "absent",
    *group_keys("g0", 4)[1:3],  # one group's two members: the second is gone with the first
    "g2#3of4",
    *[f"theirs{i}" for i in range(6)],
    "k301",
]


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("by", [None, "c0"])
def test_each_key_is_answered_as_if_removed_alone(
    monkeypatch: pytest.MonkeyPatch, force: bool, by: str | None
) -> None:
    answers, ends = [], []
    for one_at_a_time in (True, False):
        state = _state(monkeypatch, "adaptive", one_at_a_time)
        _fill(state)
        _others(state)
        answers.append((_one_by_one if one_at_a_time else _batch)(state, KEYS, force, by))
        ends.append(_end_state(state))
    assert answers[0] == answers[1]
    assert ends[0] == ends[1]
    failed = {KEYS[i] for i, a in enumerate(answers[0]) if a is not None}
    assert {"absent", "g0#2of4"} <= failed and answers[0][KEYS.index("k7", 1)] is None
    assert answers[0][len(KEYS) - 1 - KEYS[::-1].index("k7")] is not None  # (the second k7)
    busy = {"k0", "k84", "k168", "k252", *[f"theirs{i}" for i in range(6)]}
    if not force or by == "c0":  # unforced: leased ones are busy; forced by c0: only its own may go
        assert busy & failed == (busy if not force else {f"theirs{i}" for i in range(6)})
    else:  # the master's own forced call takes them all
        assert not busy & failed
