"""Prometheus metrics of one master, read from its state at scrape time (one registry per master)."""

from __future__ import annotations

import importlib
import platform
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvstore.master.service.loop_watch import LoopWatch
from kvstore.master.service.path_reports import PathReports
from kvstore.master.service.state import MasterState
from kvstore.master.wire.role import LEADER, SINGLE, STANDBY, Role
from kvstore.rpc.messages import PROTOCOL_VERSION

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
    "fence_kills_outstanding": "Kills of freed allocations queued or sent to nodes, not yet acknowledged",
    "fencing_keys": "Keys refused to puts until their freed copies' kills are acknowledged (or leases lapse)",
    "fence_held_bytes": "Freed bytes kept allocated until their kills are acknowledged (a late writer)",
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
    "fence_kills_sent": "Kills of freed allocations sent to their nodes (fenced: no transfer admitted)",
    "fence_kills_acked": "Kills of freed allocations their nodes acknowledged",
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


class RoleCollector(Collector):
    """The master's place in its cluster (kvstore.master.wire.role), served by leaders and standbys alike:
    a cluster has a leader when the sum of kvstore_master_is_leader over its masters is 1, and a failover
    shows as kvstore_master_epoch growing. Every series is labelled with the cluster and shard."""

    def __init__(self, role: Role, standbys: Callable[[], int] | None = None) -> None:
        """`standbys`: how many standbys a leader sees (absent: the series is not served)."""
        self.role, self.standbys = role, standbys

    def collect(self) -> Iterator[Metric]:
        role, labels = self.role, ["cluster", "shard"]
        values = [role.cluster, str(role.shard[0])]
        yield _one(
            GaugeMetricFamily(
                "kvstore_master_is_leader",
                "1 while this master serves its cluster's shard (elected leader, or alone without etcd), "
                "0 while it is a standby",
                labels=labels,
            ),
            values,
            1.0 if role.leading else 0.0,
        )
        named = GaugeMetricFamily(
            "kvstore_master_role", "This master's role: 1 for the one it has", labels=[*labels, "role"]
        )
        for name in (LEADER, STANDBY, SINGLE):
            named.add_metric([*values, name], 1.0 if role.name == name else 0.0)
        yield named
        yield _one(
            GaugeMetricFamily(
                "kvstore_master_epoch",
                "Epoch of the leadership this master knows (its own as leader; as standby the leader's it "
                "last saw in etcd, 0 before it saw one): it grows with every new leader, never goes back",
                labels=labels,
            ),
            values,
            float(role.leadership.epoch),
        )
        yield _one(
            GaugeMetricFamily(
                "kvstore_master_leader_info",
                "The leader this master knows (label leader: its RPC address, empty when none is known)",
                labels=[*labels, "leader"],
            ),
            [*values, role.leadership.address],
            1.0,
        )
        if self.standbys is not None and role.leading:
            yield _one(
                GaugeMetricFamily(
                    "kvstore_master_standbys", "Standby masters the leader sees in etcd", labels=labels
                ),
                values,
                float(self.standbys()),
            )


class BuildInfoCollector(Collector):
    """kvstore_build_info: which kvstore (version, wire protocol) and Python a process runs."""

    def collect(self) -> Iterator[Metric]:
        # The package root's version, its one place. Read from the loaded module: the root names the client
        # for type checkers only, which the layer contract (the master never imports it) would count.
        version = str(importlib.import_module("kvstore").__version__)
        yield _one(
            GaugeMetricFamily(
                "kvstore_build_info",
                "The kvstore version, wire protocol and Python this process runs (always 1)",
                labels=["version", "protocol", "python"],
            ),
            [version, str(PROTOCOL_VERSION), platform.python_version()],
            1.0,
        )


def _one(family: GaugeMetricFamily, labels: list[str], value: float) -> GaugeMetricFamily:
    family.add_metric(labels, value)
    return family


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
