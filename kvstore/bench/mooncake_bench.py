"""Mooncake in the shapes of `kvstore bench master` and `kvstore bench store`, for the figures beside ours.

A standalone script (it imports nothing of kvstore): `kvstore bench master --mooncake PYTHON` and
`kvstore bench store --mooncake PYTHON` run it with the Python of a virtual environment of Mooncake's own:

    python3 -m venv mc && mc/bin/pip install mooncake-transfer-engine-non-cuda numpy
    # its store module needs libibverbs.so.1 even over TCP: apt-get install libibverbs1 librdmacm1
    kvstore bench master --mooncake mc/bin/python [--objects 200000] [--batch-size 1000] [--clients 1]

It starts `mooncake_master` (from that environment's bin/) and one storage process (a Mooncake client
that mounts a segment sized to hold every object), then `--clients` load processes that each run, per
batch of keys: put = batch_put_session_start + batch_put_session_end (Mooncake's metadata-only put: no
bytes move), get = batch_get_replica_desc (the locate), exists = batch_is_exist. It prints the same JSON
lines as `kvstore bench master --json`: per op {"op", "clients", "per_s", "p50_us", "p99_us", "errors"}
(rates of the load processes add up, latency is the worst one's), then {"objects",
"rss_bytes_per_object"} (the master's resident memory growth per object). `--pipeline N`: each load
process runs N threads that take the batches in turn, as ours do.

`--data` (the store bench's shape): one client process moves real bytes over TCP, from and into buffers
it registered (batch_put_from, batch_get_into), batches of `--batch-size` values of `--value-size`, each
op for `--duration` seconds, gets cycling over a resident set written first, and get_single (get_into of
one key a call, at most 3 seconds, as our get_single_uncached); it prints one line per op
as `kvstore bench store --json` does, with "system": "mooncake".
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OPS = ("put", "get", "exists")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no resident set size for process {pid}")


def store(master: str, segment: int) -> Any:
    from mooncake.store import MooncakeDistributedStore  # (Mooncake's environment only)

    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 << 20, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"Mooncake setup failed: {rc}")
    return s


def storage_main(master: str, segment: int) -> None:
    """Mounts the segment and holds it until stdin closes."""
    s = store(master, segment)
    print("READY", flush=True)
    sys.stdin.read()
    s.close()


def timed(one: Any, batches: list[list[str]], pipeline: int) -> tuple[list[float], int, float]:
    """Runs `one` per batch, `pipeline` threads taking the batches in turn: (latencies, failures,
    seconds)."""
    import threading

    latencies, errors = [0.0] * len(batches), [0] * pipeline

    def stream(first: int) -> None:
        for i in range(first, len(batches), pipeline):
            t = time.perf_counter()
            errors[first] += one(batches[i])
            latencies[i] = time.perf_counter() - t

    began = time.perf_counter()
    threads = [threading.Thread(target=stream, args=(t,)) for t in range(1, pipeline)]
    for thread in threads:
        thread.start()
    stream(0)
    for thread in threads:
        thread.join()
    return latencies, sum(errors), time.perf_counter() - began


def load_main(master: str, objects: int, batch: int, size: int, pipeline: int) -> None:
    import numpy as np

    s = store(master, 0)
    keys = [f"bm/{os.getpid()}/{i}" for i in range(objects)]
    batches = [keys[i : i + batch] for i in range(0, objects, batch)]
    gc.freeze()  # the collector as kvstore's load processes run it (kvstore.procs.settle_collector)
    gc.set_threshold(100_000, *gc.get_threshold()[1:])

    def put(b: list[str]) -> int:
        started = s.batch_put_session_start(b, [size] * len(b))
        placed = [k for k, rc in zip(b, started, strict=True) if rc == 0]
        ended = s.batch_put_session_end(placed) if placed else []
        return len(b) - sum(1 for rc in ended if rc == 0)

    def get(b: list[str]) -> int:
        found = s.batch_get_replica_desc(b)
        return sum(1 for k in b if not found.get(k))

    def exists(b: list[str]) -> int:
        return sum(1 for there in s.batch_is_exist(b) if there != 1)

    print("READY", flush=True)
    for op, one in (("put", put), ("get", get), ("exists", exists)):
        sys.stdin.readline()  # each op starts in every load process at once (as kvstore's: load_procs)
        wall = time.time()
        latencies, errors, elapsed = timed(one, batches, pipeline)
        p50, p99 = np.percentile(latencies, [50, 99]) * 1e6
        row = {
            "op": op,
            "clients": 1,
            "per_s": objects / elapsed,
            "p50_us": p50,
            "p99_us": p99,
            "errors": errors,
            "pipeline": pipeline,
            "keys": objects,
            "started": wall,
            "ended": wall + elapsed,
        }
        print(json.dumps(row), flush=True)
    s.close()


@contextlib.contextmanager
def storage_process(me: list[str], master: str, segment: int) -> Iterator[None]:
    """A Mooncake client mounting a segment of `segment` bytes for the run (closed by closing its stdin)."""
    storage = subprocess.Popen(
        [*me, "--role", "storage", "--master", master, "--segment", str(segment)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert storage.stdout is not None
        if storage.stdout.readline().strip() != "READY":
            raise RuntimeError("the Mooncake storage process did not start")
        yield
    finally:
        if storage.stdin:
            storage.stdin.close()
        storage.wait(timeout=30)


def data_main(master: str, size: int, n: int, duration: float, segment: int) -> None:
    """The store bench's put and get with Mooncake's zero-copy batch calls (see the module's doc)."""
    import numpy as np

    s = store(master, 0)
    source = np.random.default_rng(7).integers(0, 256, (n, size), dtype=np.uint8)
    dest = np.zeros((n, size), dtype=np.uint8)
    for buffer in (source, dest):
        if s.register_buffer(buffer.ctypes.data, buffer.nbytes) != 0:
            raise RuntimeError("Mooncake could not register a buffer")
    sources = [source.ctypes.data + i * size for i in range(n)]
    dests = [dest.ctypes.data + i * size for i in range(n)]
    sizes = [size] * n
    resident = max(n, min(segment // 4 // size, 4096) // n * n)  # (as kvstore's store bench)
    keys = [f"bench/{os.getpid()}/{i}" for i in range(resident)]
    batches = [keys[i : i + n] for i in range(0, resident, n)]
    for b in batches:
        s.batch_put_from(b, sources, sizes)
    gc.freeze()
    gc.set_threshold(100_000, *gc.get_threshold()[1:])

    def put(i: int) -> int:
        rc = s.batch_put_from([f"bench/{os.getpid()}/put/{i}/{j}" for j in range(n)], sources, sizes)
        return sum(1 for r in rc if r != 0)

    def get(i: int) -> int:
        return sum(1 for r in s.batch_get_into(batches[i % len(batches)], dests, sizes) if r != size)

    def get_single(i: int) -> int:  # one key a call, as ours (its client asks the master every time)
        return int(s.get_into(keys[i % resident], dests[0], size) != size)

    # Gets first: Mooncake's puts fill the segment and evict the resident set (ours write it back).
    for op, one, per_call in (("get", get, n), ("get_single", get_single, 1), ("put", put, n)):
        latencies: list[float] = []
        errors = 0
        began = time.perf_counter()
        while time.perf_counter() - began < (duration if per_call > 1 else min(duration, 3.0)):
            t = time.perf_counter()
            errors += one(len(latencies))
            latencies.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - began
        p50, p99 = np.percentile(latencies, [50, 99]) * 1e6
        rate = (per_call * len(latencies) - errors) / elapsed  # (only keys that moved count, as ours)
        row = {"op": op, "value_size": size, "batch_size": per_call, "ops_per_s": rate}
        row["gbps"] = rate * size / 1e9
        row.update(p50_us=p50, p99_us=p99, errors=errors, transport="tcp", system="mooncake")
        print(json.dumps(row), flush=True)
    s.close()


def orchestrate_data(args: argparse.Namespace, me: list[str], address: str) -> None:
    with storage_process(me, address, args.segment):
        client = [*me, "--role", "data", "--master", address, "--segment", str(args.segment)]
        client += ["--batch-size", str(args.batch_size), "--value-size", str(args.value_size)]
        client += ["--duration", str(args.duration)]
        done = subprocess.run(client, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"the Mooncake client failed: {done.stderr.strip()[-2000:]}")
        sys.stdout.write(done.stdout)


def orchestrate(args: argparse.Namespace) -> int:
    bin_dir = Path(sys.executable).parent
    port = free_port()
    master_cmd = [str(bin_dir / "mooncake_master"), f"-rpc_port={port}", f"-metrics_port={free_port()}"]
    address = f"127.0.0.1:{port}"
    # -I: this file's folder (kvstore/bench, whose trace.py shadows the standard library's) is not put on
    # sys.path, nor is the caller's environment read.
    me = [sys.executable, "-I", os.path.abspath(__file__)]
    quiet = {"stdin": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    master = subprocess.Popen(master_cmd, stdout=subprocess.DEVNULL, **quiet)  # type: ignore[call-overload]
    if args.data:
        try:
            time.sleep(1.0)
            orchestrate_data(args, me, address)
        finally:
            master.terminate()
            master.wait(timeout=30)
        return 0
    try:
        time.sleep(1.0)
        segment = max(
            64 << 20, args.objects * args.clients * max(args.value_size, 2048) * 5 // 4
        )  # (as ours)
        with storage_process(me, address, segment):
            before = rss_bytes(master.pid)
            load = [*me, "--role", "load", "--master", address, "--objects", str(args.objects)]
            load += ["--batch-size", str(args.batch_size), "--value-size", str(args.value_size)]
            load += ["--pipeline", str(args.pipeline)]
            procs = [
                subprocess.Popen(
                    load, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
                for _ in range(args.clients)
            ]
            if any(p.stdout.readline().strip() != "READY" for p in procs):  # type: ignore[union-attr]
                raise RuntimeError("a Mooncake load process did not start")
            per_client: list[list[dict[str, Any]]] = [[] for _ in procs]
            for _ in OPS:
                for p in procs:
                    p.stdin.write("go\n")  # type: ignore[union-attr]
                    p.stdin.flush()  # type: ignore[union-attr]
                for rows, p in zip(per_client, procs, strict=True):
                    rows.append(json.loads(p.stdout.readline()))  # type: ignore[union-attr]
            for p in procs:
                p.communicate()
            after = rss_bytes(master.pid)
    finally:
        master.terminate()
        master.wait(timeout=30)
    for rows in zip(*per_client, strict=True):
        print(
            json.dumps(
                {
                    "op": rows[0]["op"],
                    "clients": len(rows),
                    # (as kvstore's: the keys over the span from the first start to the last end)
                    "per_s": sum(r["keys"] for r in rows)
                    / (max(r["ended"] for r in rows) - min(r["started"] for r in rows)),
                    "p50_us": max(r["p50_us"] for r in rows),
                    "p99_us": max(r["p99_us"] for r in rows),
                    "errors": sum(r["errors"] for r in rows),
                    "pipeline": args.pipeline,
                }
            )
        )
    objects = args.objects * args.clients
    print(json.dumps({"objects": objects, "rss_bytes_per_object": (after - before) / objects}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=200_000, help="objects each load process puts")
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--value-size", type=int, default=1024)
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--pipeline", type=int, default=1, help="threads per load process, batches in turn")
    p.add_argument("--data", action="store_true", help="the store bench's shape (real bytes over TCP)")
    p.add_argument("--duration", type=float, default=5.0, help="--data: seconds per op")
    p.add_argument("--role", choices=["orchestrator", "storage", "load", "data"], default="orchestrator")
    p.add_argument("--master", default="")
    p.add_argument("--segment", type=int, default=0, help="bytes of the storage process's segment")
    args = p.parse_args()
    if min(args.objects, args.batch_size, args.value_size, args.clients, args.pipeline) <= 0:
        p.error("objects, batch size, value size, clients and pipeline must be positive")
    if args.role == "storage":
        storage_main(args.master, args.segment)
        return 0
    if args.role == "data":
        data_main(args.master, args.value_size, args.batch_size, args.duration, args.segment)
        return 0
    if args.role == "load":
        load_main(args.master, args.objects, args.batch_size, args.value_size, args.pipeline)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
