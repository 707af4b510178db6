"""How long the master's one loop is held, measured where it runs: the longest turn (from one poll for
messages to the next: every request, reply, timer and housekeeping step of that turn) and the longest run
of each periodic or scrape-time task by name. A task that grew with the table would show here first
(`kvstore bench master` prints both; /metrics and the Stats RPC carry them)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class LoopTurns:
    """Fed by the loop's selector: a turn begins when a poll returns and ends at the next poll."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.count = 0
        self._began = 0.0

    def began(self) -> None:
        self._began = time.perf_counter()

    def ended(self) -> None:
        if self._began:
            took = time.perf_counter() - self._began
            self.count += 1
            if took > self.longest:
                self.longest = took
            self._began = 0.0


class LoopWatch:
    def __init__(self) -> None:
        self.turns: LoopTurns | None = None  # set when the master runs on its own loop (MasterLoop)
        self.longest: dict[str, float] = {}  # task -> its longest run, seconds
        self.runs: dict[str, int] = {}

    @contextlib.contextmanager
    def timed(self, task: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - began
            self.runs[task] = self.runs.get(task, 0) + 1
            if took > self.longest.get(task, 0.0):
                self.longest[task] = took

    def stats(self) -> dict[str, float]:
        """Milliseconds: loop_turn_max_ms (0 when not measured), and <task>_max_ms per task that ran."""
        out = {"loop_turn_max_ms": self.turns.longest * 1e3 if self.turns else 0.0}
        out.update({f"{task}_max_ms": took * 1e3 for task, took in self.longest.items()})
        return out
