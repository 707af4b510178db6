"""The NIC paths a heartbeat carries: every row checked before the master keeps it, and kept only while
fresh."""

from __future__ import annotations

import time

import pytest

from kvstore.errors import InvalidArgumentError
from kvstore.master.service.path_reports import PathReports
from kvstore.rpc import messages as m


def test_a_heartbeat_carries_rows_of_nic_paths() -> None:
    row = ["eth0", 1 << 40, 12, 1, 3, 2, 0]
    beat = m.Heartbeat.parse({"client_id": "c", "paths": [row]})
    assert beat.paths == [m.NicPaths("eth0", 1 << 40, 12, 1, 3, 2, 0)]
    assert m.Heartbeat.parse({"client_id": "c"}).paths is None


@pytest.mark.parametrize(
    "paths",
    [
        "eth0",
        [["eth0", 1, 2, 3, 4, 5]],  # a field short
        [["", 1, 2, 3, 4, 5, 6]],  # no name
        [["x" * 65, 1, 2, 3, 4, 5, 6]],
        [["eth0", -1, 2, 3, 4, 5, 6]],
        [["eth0", 2**63, 2, 3, 4, 5, 6]],
        [["eth0", 1.5, 2, 3, 4, 5, 6]],
        [["eth0", True, 2, 3, 4, 5, 6]],
        [[0, 1, 2, 3, 4, 5, 6]],
        [["eth0", 1, 2, 3, 4, 5, 6]] * (m.MAX_NICS + 1),
    ],
)
def test_a_malformed_row_is_refused(paths: object) -> None:
    with pytest.raises(InvalidArgumentError):
        m.Heartbeat.parse({"client_id": "c", "paths": paths})


def test_reports_go_stale_after_their_age() -> None:
    reports = PathReports(max_age=0.05)
    reports.report("a", [m.NicPaths("eth0", 1, 1, 0, 0, 1, 0)])
    assert [c for c, _ in reports.current()] == ["a"]
    time.sleep(0.1)
    reports.report("b", [m.NicPaths("default", 1, 1, 0, 0, 1, 0)])
    assert [c for c, _ in reports.current()] == ["b"]
