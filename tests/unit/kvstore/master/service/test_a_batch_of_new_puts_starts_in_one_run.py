"""put_start's first run looks at the whole batch (kvstore.master.service.puts: each run costs the master a
fixed ~20-40 us, so a batch of new puts is placed and recorded in one), later runs at twice what the last
one took, and a run that takes nothing halves the window: a batch whose items all fail one at a time
costs O(items) looks, not O(items x window)."""

from __future__ import annotations

from typing import Any

import pytest

from kvstore.errors import KVStoreError
from kvstore.master.service import puts as puts_module
from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import PutItem
from tests.unit.kvstore.master.state_helpers import Clock, MiB, make_state


def _windows(state: MasterState, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Records (window, taken) of every run of `state`'s puts."""
    runs: list[tuple[int, int]] = []
    start_run = state.puts._start_run

    def recorded(*args: Any) -> int:
        taken = start_run(*args)
        runs.append((args[2], taken))
        return taken

    monkeypatch.setattr(state.puts, "_start_run", recorded)
    return runs


def test_a_batch_of_new_puts_is_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    state = make_state(Clock(), [("h0", 64 * MiB)], client_put_bytes=64 * MiB)
    runs = _windows(state, monkeypatch)
    out: list[Any] = []
    state.puts.start_puts("c0", [PutItem(f"k{i}", 4096, i) for i in range(1000)], 1, False, 0, False, out)
    assert runs == [(puts_module.MAX_RUN, 1000)]
    assert all(isinstance(o, list) and len(o) == 1 for o in out)


def test_items_that_fail_alone_cost_the_batch_o_of_items_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    """4,096 items none of which fits (each run takes none, each item fails alone): the windows looked at
    add up to under 2 x MAX_RUN + RUN_LEAST per item (without halving: MAX_RUN per item, 16.7M)."""
    state = make_state(Clock(), [("h0", 64 * MiB)])
    runs = _windows(state, monkeypatch)
    out: list[Any] = []
    items = [PutItem(f"big{i}", 128 * MiB, i) for i in range(puts_module.MAX_RUN)]
    state.puts.start_puts("c0", items, 1, False, 0, False, out)
    assert all(isinstance(o, KVStoreError) for o in out) and len(out) == len(items)
    assert all(taken == 0 for _, taken in runs)
    looked = sum(window for window, _ in runs)
    assert looked <= 2 * puts_module.MAX_RUN + puts_module.RUN_LEAST * len(items)


def test_after_a_short_run_the_window_follows_what_runs_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored key offered again every 100 items: each run takes the 99 new ones before it (the window
    doubles after a run that took some, and a stored key's cheap refusal halves it), so the batch takes
    one run per stretch of new keys."""
    state = make_state(Clock(), [("h0", 64 * MiB)], client_put_bytes=64 * MiB)
    state.puts.put_start("c0", "stored", 4096, 7, 1, False)
    state.puts.put_end("c0", "stored")
    runs = _windows(state, monkeypatch)
    items = [PutItem("stored", 4096, 7) if i % 100 == 99 else PutItem(f"k{i}", 4096, i) for i in range(1000)]
    out: list[Any] = []
    state.puts.start_puts("c0", items, 1, False, 0, False, out)
    assert [o is None for o in out] == [i % 100 == 99 for i in range(1000)]
    assert runs[0] == (puts_module.MAX_RUN, 99)
    assert [taken for _, taken in runs if taken] == [99] * 10
    assert sum(window for window, _ in runs[1:]) <= 20 * 198
