"""`kvstore status`: what a master says of its cluster (ClusterStatus), as tables for people or one
JSON object for scripts. Asks without joining: no client registration, no transfer engine."""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from kvstore.cluster.leader import Locator
from kvstore.cluster.master_client import MasterClient
from kvstore.errors import KVStoreError
from kvstore.rpc import messages as m


def fetch_status(master: str | Locator, timeout: float = 5.0) -> dict[str, Any]:
    client = MasterClient(master, timeout, busy_poll_us=0)
    try:
        client.hello()
        status: dict[str, Any] = client.call(m.ClusterStatus())
        return status
    finally:
        client.close()


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def print_status(status: dict[str, Any], as_json: bool = False, console: Console | None = None) -> None:
    if as_json:
        print(json.dumps(status, indent=2, sort_keys=True))
        return
    out = console or Console(width=None if Console().is_terminal else 160)
    me, stats = status["master"], status["stats"]
    standbys = ", ".join(status["standbys"]) or "none"
    term = f" (cluster {me['cluster']}, epoch {me['epoch']})" if "epoch" in me else ""
    out.print(
        f"master {me['address']}  role {me['role']}{term}  standbys {standbys}  "
        f"up {me['uptime_s']:.0f} s  protocol {me['protocol']}"
    )
    nodes = Table(title="segments", title_justify="left")
    for column in ("node", "tier", "where", "used", "size", "objects", "health"):
        nodes.add_column(column, justify="right" if column in ("used", "size", "objects") else "left")
    for node in status["nodes"]:
        # a node's identity is "<host id>/<name on the host>"; a client without one, its id
        name = node["node"].removeprefix(node["host"] + "/") or node["client"][:12]
        for seg in node["segments"] or [{}]:
            where = seg.get("path") or seg.get("engine", "")
            health = seg.get("health", "no segment")
            if seg.get("degraded"):
                health += f": {seg['degraded']}"
            nodes.add_row(
                name,
                seg.get("tier", "-"),
                where,
                _size(seg["used"]) if seg else "-",
                _size(seg["size"]) if seg else "-",
                str(seg.get("objects", "-")),
                health,
            )
    out.print(nodes)
    totals = Table(title="store", title_justify="left", show_header=False)
    totals.add_column("what")
    totals.add_column("value", justify="right")
    rows = [
        ("objects", f"{stats['objects']:,}"),
        ("bytes", _size(stats["bytes"])),
        ("memory used", f"{_size(stats['used'])} of {_size(stats['capacity'])} ({stats['usage']:.1%})"),
        ("hit ratio", f"{stats['hit_ratio']:.1%} ({stats['hits']:,} hits, {stats['misses']:,} misses)"),
        ("hits / misses per s", f"{stats['hits_per_s']:.1f} / {stats['misses_per_s']:.1f}"),
        ("puts per s", f"{stats['puts_per_s']:.1f} ({_size(stats['put_bytes_per_s'])}/s)"),
        ("evictions per s", f"{stats['evictions_per_s']:.1f} ({stats['evictions']:,} in all)"),
        ("disks degraded", str(stats["disks_degraded"])),
        (
            "segments suspected",
            str(sum(1 for n in status["nodes"] for s in n["segments"] if s["health"] == "suspect")),
        ),
        ("restored objects", f"{stats['restored_objects']:,} ({stats['restored_replicas']:,} replicas)"),
    ]
    for row in rows:
        totals.add_row(*row)
    out.print(totals)


def fetch_shards(shards: list[str | Locator], timeout: float = 5.0) -> list[dict[str, Any]]:
    """Each shard's status, in shard order; a shard that cannot be asked is {"error": why} (the others
    still are). The shards are asked at once: S shards that do not answer cost one timeout, not S."""

    def one(master: str | Locator) -> dict[str, Any]:
        try:
            return fetch_status(master, timeout)
        except KVStoreError as exc:
            return {"error": str(exc)}

    if len(shards) == 1:
        return [one(shards[0])]
    with concurrent.futures.ThreadPoolExecutor(len(shards), thread_name_prefix="kvstore-status") as pool:
        return list(pool.map(one, shards))


def print_shards(
    statuses: list[dict[str, Any]], as_json: bool = False, console: Console | None = None
) -> None:
    """A cluster split over shards: every shard's status under its number (one JSON object
    {"shards": [...]} for scripts)."""
    if as_json:
        print(json.dumps({"shards": statuses}, indent=2, sort_keys=True))
        return
    out = console or Console(width=None if Console().is_terminal else 160)
    for i, status in enumerate(statuses):
        out.rule(f"shard {i} of {len(statuses)}")
        if "error" in status:
            out.print(f"unreachable: {status['error']}")
        else:
            print_status(status, console=out)
