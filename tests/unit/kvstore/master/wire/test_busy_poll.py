"""Polling for the next message only while it comes within the window (kvstore.master.busy_poll)."""

from __future__ import annotations

from kvstore.master.wire.busy_poll import BusyPoll


def test_it_polls_until_messages_keep_coming_later_than_the_window_then_sleeps() -> None:
    poll = BusyPoll(100e-6)
    assert poll.worth_it()
    poll.waited(50e-6)
    assert poll.worth_it()
    waits = 0
    while poll.worth_it():
        poll.waited(2e-3)  # the next request came 2 ms later: the window was burnt
        waits += 1
    assert 10 <= waits <= 30  # a run of slow messages stops it; one does not


def test_it_polls_again_once_messages_come_soon_again() -> None:
    poll = BusyPoll(100e-6)
    for _ in range(50):
        poll.waited(5e-3)
    assert not poll.worth_it()
    for _ in range(8):  # measured while sleeping: the time a wait took, whatever it did meanwhile
        poll.waited(60e-6)
    assert poll.worth_it()


def test_a_window_of_zero_never_polls() -> None:
    poll = BusyPoll(0.0)
    poll.waited(0.0)
    assert not poll.worth_it()
