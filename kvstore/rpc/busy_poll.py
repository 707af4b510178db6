"""When to poll for the next message instead of sleeping on it, learnt from the recent waits.

Polling saves a sleep and a wake-up (~50-80 µs on a VM) only when the message comes within the polling
window. When it does not, the window is burnt on a core that the other processes need: on a small host
the master, its nodes and its clients share two. Measured in the 4 KiB put bench (one client, batches of
32), the master's 200 µs poll caught the next request 1 time in 100, a fifth of its CPU.
"""

from __future__ import annotations

HIT_SHARE = 0.5  # poll while at least this share of the recent waits ended within the window
_WEIGHT = 1 / 8  # of the newest wait in that share (a moving average: about the last 8 count)


class BusyPoll:
    def __init__(self, seconds: float) -> None:
        """`seconds`: how long to poll before sleeping (0: never poll)."""
        self.seconds = seconds
        self._hits = 1.0  # the moving share of waits that ended within the window: polls at first

    def worth_it(self) -> bool:
        """Whether to poll for the next message before sleeping on it."""
        return self.seconds > 0 and self._hits >= HIT_SHARE

    def waited(self, seconds: float) -> None:
        """A message came `seconds` after the wait for it began (polling, sleeping, or both)."""
        self._hits += ((seconds <= self.seconds) - self._hits) * _WEIGHT
