"""A storage node's segment memory, made ready before the node joins: allocated at once, then faulted
in by several threads in chunks, with progress in the log (a 256 GiB segment takes minutes on one
thread; a node that joined first would be judged dead meanwhile)."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from transfer_engine import Region, TransferEngine

log = logging.getLogger("kvstore.node")

CHUNK = 256 << 20  # bytes one thread faults in at a time
PROGRESS_SECONDS = 2.0


def prefault_threads() -> int:
    """Threads that fault the segment in: the cores this process may use, at most 16."""
    return max(1, min(16, len(os.sched_getaffinity(0))))


def ready_segment(engine: TransferEngine, size: int, fence_slots: int, pinned: bool) -> Region:
    """The node's segment, every page faulted in. Pinned memory is locked (and so faulted) in one go."""
    if pinned:
        return engine.allocate(size, fence_slots=fence_slots, pinned=True)
    began = time.monotonic()
    region = engine.allocate(size, fence_slots=fence_slots, populate=False)
    threads = prefault_threads()
    chunks = [(at, min(CHUNK, size - at)) for at in range(0, size, CHUNK)]
    done = 0
    reported = began
    with ThreadPoolExecutor(threads, thread_name_prefix="kvstore-prefault") as pool:
        futures = [pool.submit(engine.prefault, region, at, length) for at, length in chunks]
        try:
            for future, (_, length) in zip(futures, chunks, strict=True):
                future.result()
                done += length
                if time.monotonic() - reported >= PROGRESS_SECONDS:
                    reported = time.monotonic()
                    log.info("preparing the segment: %.1f of %.1f GiB", done / 2**30, size / 2**30)
        except BaseException:
            for f in futures:
                f.cancel()
            engine.unregister(region)
            raise
    seconds = time.monotonic() - began
    log.info(
        "segment of %.1f GiB ready in %.1f s (%d threads, %.2f GB/s)",
        size / 2**30,
        seconds,
        threads,
        size / max(seconds, 1e-9) / 1e9,
    )
    return region
