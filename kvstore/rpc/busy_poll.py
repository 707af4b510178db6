"""When to poll for the next message instead of sleeping on it, learnt from the recent waits.

Polling saves a sleep and a wake-up (~50-80 µs on a VM) only when the message comes within the polling
window. When it does not, the window is burnt on a core that the other processes need: on a small host
the master, its nodes and its clients share two. Measured in the 4 KiB put bench (one client, batches of
32), the master's 200 µs poll caught the next request ~1 time in 100 (~13 µs of CPU per object put, a
fifth of the master's) and the client's 100 µs poll its reply ~2 times in 100. With one client reading
one key at a time the master catches about half, the client about 4 in 10: both keep polling.

A client learns per request kind (a small lookup is answered within the window, a put of a batch is
not) and keeps polling at a far lower share than the master: when a client stopped at the master's share,
one key read at a time settled on both sleeping (the client's replies came late because the master slept,
the master's requests came late because the client slept; get p50 ~600 µs against ~140 µs).
"""

from __future__ import annotations

MASTER_SHARE = 0.25  # the master polls while at least this share of its recent waits ended in the window
CLIENT_SHARE = 1 / 16  # a client, per request kind
PROBE_EVERY = 32  # below its share, one wait in this many polls all the same (see worth_it)
_WEIGHT = 1 / 16  # of the newest wait in the share (a moving average: about the last 16 count)


class BusyPoll:
    def __init__(self, seconds: float, least_share: float) -> None:
        """`seconds`: how long to poll before sleeping (0: never poll); `least_share`: of the recent
        waits that ended within it, below which polling stops."""
        self.seconds = seconds
        self.least_share = least_share
        self._hits = 1.0  # the moving share of waits that ended within the window: polls at first
        self._skipped = 0

    def worth_it(self) -> bool:
        """Whether to poll for the next message before sleeping on it. A wait spent sleeping also counts
        the wake-up, so it looks longer than the message took: now and then polls anyway, to see."""
        if self.seconds <= 0:
            return False
        if self._hits >= self.least_share:
            return True
        self._skipped += 1
        if self._skipped < PROBE_EVERY:
            return False
        self._skipped = 0
        return True

    def waited(self, seconds: float) -> None:
        """A message came `seconds` after the wait for it began (polling, sleeping, or both)."""
        self._hits += ((seconds <= self.seconds) - self._hits) * _WEIGHT
