"""When to poll for the next message instead of sleeping on it, learnt from the recent waits.

Polling saves a sleep and a wake-up (~50-80 µs on a VM) only when the message comes within the polling
window. When it does not, the window is burnt on a core that the other processes need: on a small host
the master, its nodes and its clients share two. Measured in the 4 KiB put bench (one client, batches of
32), the master's 200 µs poll caught the next request ~1 time in 100: ~13 µs of CPU per object put, a
fifth of the master's. With one client reading one key at a time it catches about half, and keeps
polling.

Only the master's event loop learns this way. A client that did too would stop polling when its replies
come late because the master sleeps, and the master would then sleep because the client's requests come
late: both would settle on sleeping where both polling is faster.
"""

from __future__ import annotations

HIT_SHARE = 0.25  # poll while at least this share of the recent waits ended within the window
_WEIGHT = 1 / 16  # of the newest wait in that share (a moving average: about the last 16 count)


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
