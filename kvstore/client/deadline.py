"""A read's deadline: the time by which its bytes must have arrived verified, else it is a miss.

Given to the gets as seconds from the call (`deadline=0.05`), kept as a `time.monotonic()` instant, so
every step of a call (the engine batch, a retry on another replica) gets what is left of one budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from kvstore.errors import InvalidArgumentError

LONGEST_SECONDS = 3600.0  # a deadline further off than this is a mistake (a timestamp given as seconds)


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float  # a time.monotonic() value

    @classmethod
    def after(cls, seconds: float | None) -> Deadline | None:
        """The deadline `seconds` from now (None: none). Refuses what is not a finite number of seconds in
        (0, LONGEST_SECONDS]: 0 would ask for nothing, a negative or NaN one is a caller's bug."""
        if seconds is None:
            return None
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidArgumentError(f"deadline must be seconds from now (a number), got {seconds!r}")
        if not (0 < seconds <= LONGEST_SECONDS and math.isfinite(seconds)):
            raise InvalidArgumentError(
                f"deadline must be more than 0 and at most {LONGEST_SECONDS:.0f} seconds, got {seconds!r}"
            )
        return cls(time.monotonic() + float(seconds))

    def left(self) -> float:
        """Seconds left (0 once passed)."""
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def engine_timeout(self) -> float:
        """What is left, as the engine's batch timeout: it counts whole milliseconds, so rounded up (a
        request is never cut before the deadline; at most 1 ms after it)."""
        return math.ceil(self.left() * 1000) / 1000


def transfer_timeout(deadline: Deadline | None) -> float | None:
    """The engine timeout of one batch under `deadline` (None: the engine's own transfer_timeout)."""
    return None if deadline is None else deadline.engine_timeout()
