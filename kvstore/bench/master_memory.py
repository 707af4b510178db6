"""The master's memory per object at sizes `kvstore bench master` cannot reach on a small machine.

    python -m kvstore.bench.master_memory [--objects 10000000] [--key-bytes 64] [--batch-size 1000]

`kvstore bench master` measures the master process over RPC, with a storage node whose segment holds
every object: 10M objects of 1 KiB would need a 25 GB segment. This runs the master's state (what the
master process holds: kvstore.master.service.state.MasterState, the object table and every index) in this
process, with a segment mounted by number only, and plays the node (its holds acknowledged as they are
sent). Puts are the master's own calls, batches of --batch-size: start, then end. It prints one JSON
line: {"objects", "key_bytes", "rss_bytes_per_object", "table_bytes_per_object", "python_objects",
"seconds"}: the resident memory growth per object (RSS before the puts to after), the C++ table's share
of it, the objects Python's collector tracks, and the time the puts took. A scrape (stats), a housekeeping
tick and a full collection (what the master made since it started, as its process freezes the rest) are
timed at that size too ("stats_ms", "expire_ms", "full_gc_ms").

Then bulk re-admission (what a master that restarted, or a new leader, does as the node names back what it
holds): a second, empty master state takes every object back from RestoreSegment requests of the node's
size (FENCE_BATCH records each), msgpack-encoded beforehand; "readmit_per_s" is objects per second of
the master's whole handling (unpack, parse, restore, reply). --no-readmit skips it.
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import msgpack

from kvstore import rpc
from kvstore.config.master import MasterConfig
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.procs import settle_collector
from kvstore.rpc import messages as m
from kvstore.rpc.messages import MountSegment


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def timed_ms(fn: object) -> float:
    began = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - began) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--key-bytes", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--no-readmit", action="store_true", help="skip the bulk re-admission")
    args = parser.parse_args()
    n, width = args.objects, args.key_bytes
    state = MasterState(MasterConfig.load())
    state.members.register_client("node", "host")
    state.members.mount_segment(
        MountSegment("node", "127.0.0.1:1", 1, n * 2048 * 2, "host", fence_slots=n * 2)
    )
    holds = state.space.holds
    gc.collect()
    settle_collector()  # as the master process does once started
    before = rss_bytes()
    began = time.perf_counter()
    for start in range(0, n, args.batch_size):
        keys = [f"{i:0{width}d}" for i in range(start, min(n, start + args.batch_size))]
        out: list[object] = []
        state.puts.start_puts("node", [m.PutItem(k, 1024, 7) for k in keys], 1, False, 0, False, out)  # type: ignore[arg-type]
        state.puts.commit_puts("node", keys)
        holds.take("node", 1 << 30)
        holds.acknowledge("node", 1 << 62)
        state.members.heartbeat("node")
    seconds = time.perf_counter() - began
    gc.collect()
    grown = rss_bytes() - before
    row = {
        "objects": n,
        "key_bytes": width,
        "rss_bytes_per_object": grown / n,
        "table_bytes_per_object": state.ledger.objects.table.memory_bytes / n,
        "python_objects": len(gc.get_objects()),
        "seconds": seconds,
        "stats_ms": timed_ms(state.stats),
        "expire_ms": timed_ms(state.expire),
        "full_gc_ms": timed_ms(gc.collect),
    }
    if not args.no_readmit:
        row["readmit_per_s"] = readmit(state, n)
    print(json.dumps(row), flush=True)
    return 0


def held_records(state: MasterState) -> list[tuple[int, int, int, str, int, int, bool, int, int]]:
    """What the node holds, as it names it back (RestoreSegment's records, with their target), newest
    first."""
    table = state.ledger.objects.table
    records = []
    start: int | None = 0
    while start is not None:
        found, start = table.scan(start, 4096)
        for key, ref in found:
            ((_, offset, slot, gen),) = table.copies(ref)
            size, checksum, pinned = table.size(ref), table.checksum(ref), table.pinned(ref)
            base, target = table.base_replicas(ref), table.target_replicas(ref)
            records.append((offset, slot, gen, key, size, checksum, pinned, base, target))
    records.sort(key=lambda r: r[2], reverse=True)
    return records


def readmit(state: MasterState, n: int) -> float:
    """Objects per second a fresh master takes back from the node's RestoreSegment requests."""
    records = held_records(state)
    fresh = MasterState(MasterConfig.load())
    handlers = Handlers(fresh)
    fresh.members.register_client("node", "host", "node")
    segment = fresh.members.mount_segment(
        MountSegment("node", "127.0.0.1:1", 1, n * 2048 * 2, "host", n * 2, restoring=True)
    )
    frames = []
    for at in range(0, len(records), m.FENCE_BATCH):
        chunk = [list(r) for r in records[at : at + m.FENCE_BATCH]]
        last = at + m.FENCE_BATCH >= len(records)
        params = {"client_id": "node", "segment_id": segment, "records": chunk, "last": last}
        frames.append(msgpack.packb([1, "restore_segment", params]))
    del records
    gc.collect()
    settle_collector()  # as a master that just started: what came before is out of the collector's way
    began = time.perf_counter()
    for frame in frames:
        msg_id, method, params = rpc.parse_request(rpc.unpack(frame))
        refused = handlers.handle(method, params)
        rpc.pack([msg_id, 0, "", refused])
    seconds = time.perf_counter() - began
    if len(fresh.objects) != n:
        raise SystemExit(f"re-admission took back {len(fresh.objects)} of {n} objects")
    return n / seconds


if __name__ == "__main__":
    raise SystemExit(main())
