"""What each process's transfer engine reports of its NIC paths on its heartbeat (bytes, slices,
failures and failovers per local NIC, and how many of its paths are up or down), kept for /metrics only:
telemetry, not cluster state (never journaled, gone when the master restarts, dropped when a process
stops reporting)."""

from __future__ import annotations

import time
from collections.abc import Iterator

from kvstore.rpc.messages import NicPaths


class PathReports:
    def __init__(self, max_age: float) -> None:
        """`max_age`: seconds after which a process's last report no longer counts (its TTL)."""
        self.max_age = max_age
        self._by_client: dict[str, tuple[float, list[NicPaths]]] = {}

    def report(self, client_id: str, rows: list[NicPaths]) -> None:
        self._by_client[client_id] = (time.monotonic(), rows)

    def current(self) -> Iterator[tuple[str, NicPaths]]:
        """(client id, row) of every report still fresh; stale ones are dropped on the way (a scrape walks
        one row per client and NIC, as the exposition must)."""
        oldest = time.monotonic() - self.max_age
        for client_id in [c for c, (at, _) in self._by_client.items() if at < oldest]:
            del self._by_client[client_id]
        for client_id, (_, rows) in self._by_client.items():
            for row in rows:
                yield client_id, row
