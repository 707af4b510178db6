"""Warnings about misbehaving peers: one a second per cause at most, then how many were held back (a flood
of bad peers must not flood the log; the engines' servers do the same in C++). Thread-safe."""

from __future__ import annotations

import logging
import threading
import time

MAX_CAUSES = 256  # (causes are few; the table never grows with the peers)


class LimitedLog:
    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # cause -> (when last logged, held back since)

    def warn(self, cause: str, line: str) -> None:
        """Logs `line` unless a line of `cause` was logged less than a second ago."""
        now = time.monotonic()
        with self._lock:
            last, held = self._last.get(cause, (float("-inf"), 0))
            if now - last < 1.0:
                self._last[cause] = (last, held + 1)
                return
            if len(self._last) >= MAX_CAUSES:
                self._last.clear()
            self._last[cause] = (now, 0)
        more = f" (and {held} more since the last line)" if held else ""
        self._log.warning("%s%s", line, more)
