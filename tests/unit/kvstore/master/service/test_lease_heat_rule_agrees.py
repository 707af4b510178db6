"""The lease and heat rule of a read is written twice: in Python for a single read (the master's
get_replicas: the lease in service/access.py, the heat and the attention test in
planners/replication.py Replicator.note_access) and in C++ for a batch (ObjectTable.locate_many:
csrc/meta/object_use.cpp record_use / needs_attention). Two masters given the same objects and the same
reads at the same times, one through each path, must end with the same leases, heats, access counts and
the same objects drawn to replication's attention."""

from __future__ import annotations

import pytest

from kvstore.config import MasterConfig
from kvstore.master.service.state import MasterState

MiB = 1 << 20
KEYS = ("hot", "cold", "set")


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def master(clock: Clock) -> MasterState:
    config = MasterConfig.load(hot_access_rate=10.0, heat_half_life=2.0, lease_ttl=0.5)
    state = MasterState(config, clock=clock)
    for i in range(2):
        state.members.register_client(f"c{i}", f"h{i}")
        state.members.mount_segment(f"c{i}", f"127.0.0.1:{7000 + i}", 1, 16 * MiB, f"h{i}")
    for key in KEYS:
        state.puts.put_start("c0", key, MiB, 7, 1, False)
        state.puts.put_end("c0", key)
    state.access.change_replica("set", 2)  # a count set by a user: attention on every read
    return state


def reads() -> list[tuple[float, str]]:
    """(seconds since the last read, key): a burst that makes "hot" hot, sparse reads of the others,
    a pause long enough for the heat to decay, and a clock that does not move between two reads."""
    burst = [(0.01, "hot")] * 60
    sparse = [(3.0, "cold"), (0.0, "cold"), (1.5, "set"), (7.25, "hot"), (0.3, "set")]
    return burst + sparse + [(0.02, "hot")] * 20 + [(11.0, "cold")]


def snapshot(state: MasterState, key: str) -> tuple[float, float, float, float, int]:
    meta = state.objects[key]
    return meta.lease_until, meta.heat, meta.heat_time, meta.last_access, meta.access_count


def test_single_reads_in_python_and_batch_reads_in_cpp_agree() -> None:
    python_clock, cpp_clock = Clock(), Clock()
    by_python, by_cpp = master(python_clock), master(cpp_clock)
    hottest = 0.0
    for step, (pause, key) in enumerate(reads()):
        python_clock.now += pause
        cpp_clock.now += pause
        by_python.replicator.touched.clear()
        by_cpp.replicator.touched.clear()
        assert by_python.access.get_replicas(key) is not None
        by_cpp.access.locate_many([key], False)
        for name in KEYS:
            expected = snapshot(by_python, name)
            assert snapshot(by_cpp, name) == pytest.approx(expected, rel=1e-12, abs=1e-12), (step, name)
        assert by_cpp.replicator.touched == by_python.replicator.touched, step
        hottest = max(hottest, by_cpp.objects["hot"].heat)
    # Both branches of the attention test were compared: the burst made "hot" hot, "cold" never was.
    assert hottest >= by_cpp.replicator.hot_heat > by_cpp.objects["cold"].heat
