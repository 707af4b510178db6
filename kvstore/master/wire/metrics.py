"""Prometheus metrics of one master, read from its state at scrape time (one registry per master)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvstore.master.service.loop_watch import LoopWatch
from kvstore.master.service.path_reports import PathReports
from kvstore.master.service.state import MasterState

_GAUGES = {
    "objects": "Visible objects",
    "pending_puts": "Puts started and not yet ended",
    "bytes": "Bytes of visible objects",
    "capacity": "Bytes of all mounted segments",
    "used": "Bytes allocated in segments",
    "usage": "used / capacity",
    "segments": "Mounted segments",
    "segments_restoring": "Mounted segments whose node is still naming back the objects it holds",
    "clients": "Registered clients",
    "copy_tasks": "Replica copies planned and not yet reported",
    "disk_capacity": "Bytes of all mounted disk tiers",
    "disk_used": "Bytes of disk records",
    "disk_objects": "Objects with a disk record",
    "disk_tasks": "Demotions and loads handed to nodes and not yet reported",
    "disks_degraded": "Disk tiers failing writes (nothing is demoted to them until writes work again)",
    "disks_broken": "Old name of disks_degraded",
}
_COUNTERS = {
    "puts": "Objects made visible",
    "put_bytes": "Bytes made visible",
    "hits": "Lookups that found an object",
    "misses": "Lookups that found nothing",
    "evictions": "Objects evicted",
    "evicted_bytes": "Bytes evicted",
    "evictions_to_disk": "Evictions that dropped only memory copies (the object stayed on disk)",
    "demotions": "Objects copied to a disk tier",
    "demote_failures": "Demotions that failed or timed out",
    "loads": "Disk-only objects loaded into memory for a reader",
    "load_failures": "Loads that failed their checks, timed out or found no room (a miss)",
    "promotions": "Objects loaded from disk and read again within the promote window",
    "disk_direct_reads": "Disk-only objects read from the disk file by a reader on its host",
    "disk_served_reads": "Disk-only objects read by readers on other hosts from the file its node serves",
    "disk_evictions": "Disk records dropped to make room on a disk",
    "disk_restored": "Records restarted nodes offered back",
    "reclaimed_puts": "Abandoned puts reclaimed",
    "dropped_clients": "Clients dropped after their heartbeat TTL",
    "suspected_segments": "Segments clients reported unreachable (not offered until their node heartbeats)",
    "corrupt_replicas": "Replicas dropped after a reader's checksum mismatch",
    "stalls": "Times the master found it had not run (paused, or held by one request)",
    "stalled_seconds": "Seconds the master did not run; they count as nobody's silence",
    "replica_copies": "Replicas added for hot keys or change_replica",
    "replica_copy_failures": "Replica copies that failed or expired",
    "replicas_dropped": "Extra replicas dropped after a key cooled",
}


class StateCollector(Collector):
    def __init__(self, state: MasterState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        stats = self.state.stats()
        for name, doc in _GAUGES.items():
            yield GaugeMetricFamily(f"kvstore_{name}", doc, value=stats[name])
        for name, doc in _COUNTERS.items():
            yield CounterMetricFamily(f"kvstore_{name}", doc, value=stats[name])


class LoopCollector(Collector):
    """How long the loop was held (kvstore.master.service.loop_watch): its longest turn, each task's longest
    run."""

    def __init__(self, watch: LoopWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        turns = self.watch.turns
        yield GaugeMetricFamily(
            "kvstore_master_loop_turn_max_seconds",
            "Longest turn of the master's loop since it started (every request and task of the turn)",
            value=turns.longest if turns else 0.0,
        )
        longest = GaugeMetricFamily(
            "kvstore_master_task_max_seconds",
            "Longest run of each periodic or scrape-time task of the master since it started",
            labels=["task"],
        )
        for task, took in sorted(self.watch.longest.items()):
            longest.add_metric([task], took)
        yield longest


_PATH_COUNTERS = {
    "bytes": "Bytes moved by transfer slices that completed on paths leaving on this NIC",
    "slices": "Transfer slices completed on paths leaving on this NIC",
    "failures": "Times a path leaving on this NIC went down",
    "failovers": "Slices a path leaving on this NIC lost and another path carried",
}


class PathCollector(Collector):
    """Each process's transfer paths per local NIC, as its heartbeats report them ("default": the
    kernel's route). Counters restart when a process reconnects a peer."""

    def __init__(self, reports: PathReports) -> None:
        self.reports = reports

    def collect(self) -> Iterator[Metric]:
        labels = ["client", "nic"]
        counters = {
            name: CounterMetricFamily(f"kvstore_path_{name}", doc, labels=labels)
            for name, doc in _PATH_COUNTERS.items()
        }
        up = GaugeMetricFamily("kvstore_paths_up", "Paths leaving on this NIC that are up", labels=labels)
        down = GaugeMetricFamily(
            "kvstore_paths_down", "Paths leaving on this NIC that are down (probed until back)", labels=labels
        )
        for client, row in self.reports.current():
            for name, family in counters.items():
                family.add_metric([client, row.nic], getattr(row, name))
            up.add_metric([client, row.nic], row.up)
            down.add_metric([client, row.nic], row.down)
        yield from counters.values()
        yield up
        yield down


class MasterMetrics:
    def __init__(self, state: MasterState, watch: LoopWatch | None, paths: PathReports) -> None:
        """`paths`: the clients' path reports the handlers keep (the server's)."""
        self.registry = CollectorRegistry()
        self.registry.register(StateCollector(state))
        self.registry.register(LoopCollector(watch or LoopWatch()))
        self.registry.register(PathCollector(paths))
        self.rpc_seconds = Histogram(
            "kvstore_rpc_seconds",
            "Master RPC handling time",
            ["method"],
            registry=self.registry,
            buckets=(1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0),
        )
