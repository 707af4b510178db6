"""The cluster as the master sees it, for `kvstore status`: its own role, the nodes and their segments
per tier (memory, disk) with usage and health, and the store's counters with recent rates.

Read-only over the master's state. Rates come from samples the housekeeping loop takes (RateWindow), so
two people asking at once see the same figures.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from kvstore.master.service.state import MasterState
from kvstore.rpc.messages import PROTOCOL_VERSION

RATE_SECONDS = 60.0  # the window rates are taken over
RATED = ("hits", "misses", "evictions", "puts", "put_bytes")


class RateWindow:
    """Counters sampled over the last RATE_SECONDS: per-second rates of RATED."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, dict[str, float]]] = collections.deque()

    def sample(self, now: float, counters: dict[str, Any]) -> None:
        self._samples.append((now, {k: float(counters.get(k, 0)) for k in RATED}))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_SECONDS:
            self._samples.popleft()

    def rates(self, now: float, counters: dict[str, Any]) -> dict[str, float]:
        if not self._samples:
            return {f"{k}_per_s": 0.0 for k in RATED}
        then, old = self._samples[0]
        seconds = max(now - then, 1e-9)
        return {f"{k}_per_s": max(0.0, (float(counters.get(k, 0)) - old[k]) / seconds) for k in RATED}


def cluster_status(state: MasterState, rates: RateWindow, address: str, started: float) -> dict[str, Any]:
    now = state.clock()
    stats = state.stats()
    rows: dict[str, list[dict[str, Any]]] = {}  # per client, its segments of every tier: one pass
    for space in state.tiers:
        for seg in sorted(space.segments.values(), key=lambda s: s.id):
            rows.setdefault(seg.client_id, []).append(space.describe(seg))
    nodes, members = [], state.members
    for client in members.clients.values():
        segments = rows.get(client.id, [])
        if not segments and not client.node_id:
            continue  # a plain client
        nodes.append(
            {
                "client": client.id,
                "host": client.host_id,
                "node": client.node_id.partition("#")[0],  # (without its key's fingerprint)
                "seen_s_ago": round(max(0.0, now - client.last_seen), 3),
                "segments": segments,
            }
        )
    lookups = stats["hits"] + stats["misses"]
    return {
        "master": {
            "address": address,
            "role": "single",  # no standbys: HA with etcd names leader and standbys here
            "protocol": PROTOCOL_VERSION,
            "uptime_s": round(time.monotonic() - started, 3),
        },
        "standbys": [],
        "nodes": nodes,
        "stats": {
            **stats,
            "hit_ratio": stats["hits"] / lookups if lookups else 0.0,
            **rates.rates(now, stats),
        },
    }
