"""`kvstore bench trace --disk-capacity-blocks N` without --simulate: the trace replayed through a real
store whose node has `capacity` blocks of memory over a disk tier of N blocks (global mode).

Each request asks the master for its stored prefix (match_prefix), reads the hits that are only on disk
(so the node loads them and the promotion rule runs, as an engine reading its hits would make happen),
then offers the rest of its blocks. Demotion runs as deployed: asynchronously on the node.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kvstore.bench.trace import Trace, TraceResult, _Node, _result, replay, replay_master_config


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
            segment_size=capacity * payload_bytes,
            disk=str(Path(where) / "tier"),
            disk_size=disk_capacity * record_bytes(payload_bytes),
            disk_staging=16 << 20,
        )
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
