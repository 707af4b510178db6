"""Polling for the next message only while it comes within the window (kvstore.rpc.busy_poll)."""

from __future__ import annotations

from kvstore.rpc.busy_poll import CLIENT_SHARE, MASTER_SHARE, PROBE_EVERY, BusyPoll


def polls_in(poll: BusyPoll, waits: int, seconds: float) -> int:
    """How many of `waits` waits, each ending after `seconds`, were polled."""
    polled = 0
    for _ in range(waits):
        polled += poll.worth_it()
        poll.waited(seconds)
    return polled


def test_it_polls_until_messages_keep_coming_later_than_the_window_then_sleeps() -> None:
    poll = BusyPoll(100e-6, MASTER_SHARE)
    assert polls_in(poll, 5, 2e-3) == 5  # a few slow messages do not stop it
    polls_in(poll, 50, 2e-3)
    assert polls_in(poll, 10 * PROBE_EVERY, 2e-3) == 10  # then only a probe now and then


def test_it_polls_again_once_messages_come_soon_again() -> None:
    poll = BusyPoll(100e-6, MASTER_SHARE)
    polls_in(poll, 100, 5e-3)
    assert not poll.worth_it()
    polls_in(poll, 8, 60e-6)  # measured while sleeping: the time a wait took, whatever it did meanwhile
    assert poll.worth_it()


def test_a_client_keeps_polling_while_a_few_replies_come_within_the_window() -> None:
    poll = BusyPoll(100e-6, CLIENT_SHARE)
    for _ in range(40):  # one reply in five in time: the master polls too, and answers at once
        polls_in(poll, 4, 300e-6)
        polls_in(poll, 1, 50e-6)
    assert polls_in(poll, 10, 300e-6) == 10


def test_a_window_of_zero_never_polls() -> None:
    poll = BusyPoll(0.0, MASTER_SHARE)
    assert polls_in(poll, 2 * PROBE_EVERY, 0.0) == 0
