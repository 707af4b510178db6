"""When a client polls for its master's reply instead of sleeping on it, learnt from the recent replies.

Polling saves a sleep and a wake-up (tens of µs on a VM) when the reply starts to arrive within the
window. When it does not, the window is burnt on a core the master itself needs to answer: on a small
host the client, the master and the nodes share two. Measured with one client reading one 512 KiB key at
a time beside other work (load ~20 on 2 cores), the 100 µs poll caught no reply and the uncached get's
p50 was 412 µs with it, 318 µs without it.

Unlike the master's loop (kvstore.master.wire.busy_poll), which learns from when requests come, a client
judges its polls only by polls: a reply it slept on is seen late by the wake-up's length, which would
count a reply that came in time as late and keep the client sleeping for good. So while polling does not
pay, every PROBE_EVERY-th reply is still polled for, and those probes decide when it pays again.
"""

from __future__ import annotations

import select
import time

HIT_SHARE = 0.25  # poll while at least this share of the recent polls caught their reply
PROBE_EVERY = 16  # while polling does not pay, still poll for one reply in this many
_WEIGHT = 1 / 16  # of the newest poll in that share (a moving average: about the last 16 count)


class ReplySpin:
    def __init__(self, seconds: float) -> None:
        """`seconds`: how long to poll for a reply before sleeping on it (0: never poll)."""
        self.seconds = seconds
        self._hits = 1.0  # the moving share of polls that caught their reply: polls at first
        self._skipped = 0  # replies slept on since the last poll

    def worth_it(self) -> bool:
        """Whether to poll for the next reply (a probe counts as worth it)."""
        if self.seconds <= 0:
            return False
        if self._hits >= HIT_SHARE or self._skipped + 1 >= PROBE_EVERY:
            self._skipped = 0
            return True
        self._skipped += 1
        return False

    def polled(self, caught: bool) -> None:
        """A poll ended: with its reply starting to arrive (`caught`), or with the window over."""
        self._hits += (caught - self._hits) * _WEIGHT

    def wait(self, poller: select.poll) -> None:
        """Polls (without sleeping) until the reply starts to arrive or the window is over, when that
        pays. A zero-timeout poll: a recv on a socket with a timeout would sleep in the kernel instead."""
        if not self.worth_it():
            return
        deadline = time.perf_counter() + self.seconds
        while time.perf_counter() < deadline:
            if poller.poll(0):
                self.polled(True)
                return
        self.polled(False)
