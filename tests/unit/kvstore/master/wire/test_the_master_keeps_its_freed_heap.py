"""A master process keeps the heap it frees (kvstore.master.wire.heap): buffers of a batch's size made and
freed request after request no longer page-fault in every time. Each case runs in a fresh interpreter
(the setting is the whole process's)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.skipif(
        platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
    ),
    pytest.mark.skipif(
        any(f"lib{s}san" in os.environ.get("LD_PRELOAD", "") for s in ("a", "t", "m", "hwa")),  # (--sanitize)
        reason="a sanitizer's allocator stands in for glibc's malloc (mallopt does nothing there)",
    ),
]

# Eight 300 KB buffers alive at once, then freed, 100 times (a read's request frames and their replies,
# over the sizes the C library's own threshold grows to); prints the minor page faults the loop took.
CHURN = """
import resource, sys
from kvstore.master.wire.heap import keep_freed_heap
if sys.argv[1] == "keep":
    assert keep_freed_heap()
def churn():
    for _ in range(100):
        buffers = [bytearray(300_000) for _ in range(8)]
        del buffers
churn()  # (the heap grows to its size once)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
churn()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str, tunables: str | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    done = subprocess.run([sys.executable, "-c", CHURN, mode], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_freed_batches_are_reused_without_faulting_their_pages_in_again() -> None:
    assert faults("default") > 1000  # (the C library's default gives the memory back every round)
    assert faults("keep") < 50


def test_an_operators_own_malloc_tuning_is_left_alone() -> None:
    assert faults("keep-check", "glibc.malloc.trim_threshold=131072") > 1000
