"""The master process keeps the heap memory it frees for its next requests instead of handing it back to
the system at once.

Each request's frames and reply are made, copied and freed in turn (a get batch of 1,000 keys: a ~70 KB
reply written by the table, then copied into its frame). With glibc's defaults, freed memory at the heap's
top beyond a threshold (128 KiB, raised to twice the largest block it ever mapped alone) goes back to the
system, and the next request faults it in again page by page: under `kvstore bench master`'s gets that
was ~17% of the master's CPU (perf: the kernel's share 25% -> 7% with the heap kept). Keeping up to
KEEP_BYTES costs at most that much resident memory.
"""

from __future__ import annotations

import ctypes
import os

KEEP_BYTES = 16 << 20  # (far above a batch's buffers; below it no allocation is a mmap of its own)
_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3


def keep_freed_heap(keep: int = KEEP_BYTES) -> bool:
    """Lets this process's C library keep up to `keep` bytes of freed heap (and serve allocations below
    that from the heap, not each from a mapping of its own). Whether it was set: not where the C library
    has no mallopt (not glibc) nor where the operator tuned its malloc already (GLIBC_TUNABLES)."""
    if "malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, keep)) and bool(mallopt(_M_MMAP_THRESHOLD, keep))
