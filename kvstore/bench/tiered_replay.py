"""`kvstore bench trace --disk-capacity-blocks N`: the trace replayed over `capacity` blocks of memory above
a disk tier of N blocks, simulated (simulate_tiered: kvstore.bench.tiered_cache) or, without --simulate,
through a real store whose node has that memory and disk tier (replay_real_tiered, global mode).

Each request asks the master for its stored prefix (match_prefix), reads the hits that are only on disk
(so the node loads them and the promotion rule runs, as an engine reading its hits would make happen),
then offers the rest of its blocks. Demotion runs as deployed: asynchronously on the node.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kvstore.bench.tiered_cache import TieredCache
from kvstore.bench.trace import ROUTES, Trace, TraceResult, _Node, _result, replay, replay_master_config
from kvstore.errors import InvalidArgumentError


def simulate_tiered(
    trace: Trace,
    capacity: int,
    disk_capacity: int,
    policy: str = "adaptive",
    mode: str = "global",
    nodes: int = 1,
    name: str = "trace",
    route: str = "longest",
    times: Sequence[float] | None = None,
    promote_window: float = 600.0,
) -> TraceResult:
    """simulate() with a disk tier of `disk_capacity` blocks per node under each node's `capacity` blocks
    of memory (kvstore.bench.tiered_cache); promotion windows are in trace seconds (request index where
    the trace has no timestamps)."""
    if mode not in ("global", "local") or route not in ROUTES:
        raise InvalidArgumentError("mode is global or local; route is longest or balanced")
    count = 1 if mode == "global" else nodes
    scale = nodes if mode == "global" else 1
    caches = [
        TieredCache(policy, capacity * scale, disk_capacity * scale, promote_window) for _ in range(count)
    ]
    replay_nodes = [_Node(c.prefix, c.admit) for c in caches]
    replay(trace, replay_nodes, mode, route, times)
    result = _result(
        name, mode, nodes, capacity, policy, len(trace), replay_nodes, sum(c.evictions for c in caches), True
    )
    result.disk_capacity_blocks = disk_capacity
    result.memory_hits = sum(c.memory_hits for c in caches)
    result.disk_hits = sum(c.disk_hits for c in caches)
    result.demotions = sum(c.demotions for c in caches)
    result.promotions = sum(c.promotions for c in caches)
    return result


def replay_real_tiered(
    trace: Trace,
    capacity: int,
    disk_capacity: int,
    policy: str = "adaptive",
    payload_bytes: int = 1024,
    name: str = "trace",
    times: Sequence[float] | None = None,
    directory: str | None = None,
) -> TraceResult:
    """The master's promote window is wall-clock time here (its default), not trace time: the replay runs
    far faster than the trace's hour. Objects are at least 2 KiB: a node has one allocation (fence) slot
    per 2 KiB of segment, so smaller ones would fill its slots before its bytes and memory would hold
    fewer blocks than `capacity`."""
    from kvstore import Store
    from kvstore.cluster.session import Session
    from kvstore.config import MasterConfig, NodeConfig, StoreConfig
    from kvstore.master import Master
    from kvstore.node import StorageNode
    from kvstore.rpc.disk_record import record_bytes

    config = replay_master_config(policy, payload_bytes)
    payload_bytes = max(payload_bytes, 2048)
    config["disk_tasks"] = 4096
    config["demote_watermark"] = 0.3  # requests arrive back to back: keep most of memory backed by disk
    master = Master.start_in_thread(MasterConfig.load(**config))
    with tempfile.TemporaryDirectory(dir=directory, prefix="kvstore-trace-disk-") as where:
        session = Session(StoreConfig.load(master=master.address, buffer_size="1MiB", rpc_busy_poll_us=0))
        node_config = NodeConfig.load(
            disk=str(Path(where) / "tier"),
            disk_size=disk_capacity * record_bytes(payload_bytes),
            disk_staging=16 << 20,
        )
        # The memory of exactly `capacity` blocks, below a node process's least segment (MIN_SEGMENT) when
        # the model is small: an in-process node of this replay, not one an operator runs.
        node_config = dataclasses.replace(node_config, segment_size=capacity * payload_bytes)
        node = StorageNode(session, node_config)
        session.start()
        try:
            with Store.connect(master.address, buffer_size="1MiB", rpc_busy_poll_us=0) as store:
                payload = np.zeros(payload_bytes, np.uint8)
                store.register_buffer(payload)
                counts = {"memory": 0, "disk": 0}
                last: list[list[str]] = [[]]  # the keys of the last match that are on disk only

                def prefix(keys: list[str]) -> int:
                    match = store.match_prefix(keys)
                    last[0] = [k for k, where in zip(keys, match.replicas, strict=False) if not where]
                    return match.matched

                def admit(keys: list[str], n: int, now: float) -> None:
                    on_disk = last[0]
                    counts["disk"] += len(on_disk)
                    counts["memory"] += n - len(on_disk)
                    if on_disk:
                        store.batch_get(on_disk)  # the engine reads its hits: disk-only ones are loaded
                    store.batch_put_from(keys[n:], [payload] * (len(keys) - n))

                replay_nodes = [_Node(prefix, admit)]
                replay(trace, replay_nodes, "global", "longest", times)
                state = master.master.state
                result = _result(
                    name,
                    "global",
                    1,
                    capacity,
                    policy,
                    len(trace),
                    replay_nodes,
                    state.counters.evictions,
                    False,
                )
                result.disk_capacity_blocks = disk_capacity
                result.memory_hits, result.disk_hits = counts["memory"], counts["disk"]
                result.demotions, result.promotions = state.disk.demotions, state.disk.promotions
                return result
        finally:
            node.close()
            session.close()
            master.stop()
