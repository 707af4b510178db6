"""A client polls for its master's reply while polling catches replies, sleeps on them once it does not,
and still probes so that it polls again when replies come back in time (kvstore.cluster.reply_spin)."""

from __future__ import annotations

import select
import socket
import time

from kvstore.cluster.reply_spin import HIT_SHARE, PROBE_EVERY, ReplySpin


def _polls(spin: ReplySpin, calls: int, caught: bool) -> int:
    """How many of `calls` replies it polled for, each poll ending `caught` or not."""
    polled = 0
    for _ in range(calls):
        if spin.worth_it():
            polled += 1
            spin.polled(caught)
    return polled


def test_it_polls_while_polls_catch_replies() -> None:
    spin = ReplySpin(100e-6)
    assert _polls(spin, 200, caught=True) == 200


def test_late_replies_turn_polling_down_to_probes_only() -> None:
    spin = ReplySpin(100e-6)
    _polls(spin, 64, caught=False)  # (the share falls below HIT_SHARE within these)
    assert _polls(spin, 16 * PROBE_EVERY, caught=False) == 16  # one probe in PROBE_EVERY replies


def test_probes_that_catch_replies_bring_polling_back() -> None:
    spin = ReplySpin(100e-6)
    _polls(spin, 64, caught=False)
    assert not spin.worth_it()
    calls = 0
    while not (spin.worth_it() and spin.worth_it()):  # (two in a row: no longer only probes)
        spin.polled(True)
        calls += 1
        assert calls < 64 * PROBE_EVERY
    assert _polls(spin, 100, caught=True) == 100
    assert spin._hits >= HIT_SHARE


def test_no_window_never_polls() -> None:
    spin = ReplySpin(0)
    assert _polls(spin, 5 * PROBE_EVERY, caught=True) == 0


def test_wait_returns_as_a_reply_arrives_and_counts_it() -> None:
    left, right = socket.socketpair()
    with left, right:
        poller = select.poll()
        poller.register(left, select.POLLIN)
        spin = ReplySpin(0.5)
        right.send(b"x")
        began = time.perf_counter()
        spin.wait(poller)
        assert time.perf_counter() - began < 0.25  # (it did not poll the whole window)
        assert spin._hits == 1.0


def test_wait_polls_the_window_when_no_reply_comes_and_counts_a_miss() -> None:
    left, right = socket.socketpair()
    with left, right:
        poller = select.poll()
        poller.register(left, select.POLLIN)
        spin = ReplySpin(0.02)
        began = time.perf_counter()
        spin.wait(poller)
        assert time.perf_counter() - began >= 0.02
        assert spin._hits < 1.0
