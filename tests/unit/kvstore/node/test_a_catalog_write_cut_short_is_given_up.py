"""A catalog write the file system cuts short (a full tmpfs, a file size limit: os.write returns fewer bytes)
must not leave a torn record in the log: replay ends at the first record whose tag does not hold, so every
record after it would be unread at the node's restart, a later kill among them, and the catalog would
name back an object the master had killed (its bytes may still check out). The catalog gives such a file
up as it does a failed write: said once, the file removed, kept in memory.

Real files, a real short write: the scenario runs in a child process under RLIMIT_FSIZE (SIGXFSZ ignored),
where the kernel writes what fits and returns the short count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SCENARIO = r"""
import json, os, resource, signal, sys
from kvstore.node.catalog import SegmentCatalog
from kvstore.rpc.records import HeldReplica

path, room = sys.argv[1], int(sys.argv[2])
secret = b"k" * 32
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
catalog = SegmentCatalog(path, secret)
catalog.hold([HeldReplica(1, 1, 0, 1, 5, "killed", 10, 123, False, 1)])
# The next record fits only in part.
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + room, resource.RLIM_INFINITY))
catalog.hold([HeldReplica(2, 1, 4096, 2, 6, "cut/" + "x" * 60, 10, 456, False, 1)])
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
catalog.drop([1], [5])  # the master killed the first object
lost = catalog.lost
catalog.close()
reopened = SegmentCatalog(path, secret)
print(json.dumps({"lost": lost, "named": sorted(reopened._entries), "file": os.path.exists(path)}))
"""


def _run(tmp_path: Path, room: int) -> dict[str, Any]:
    path = tmp_path / "segment.catalog"
    done = subprocess.run(
        [sys.executable, "-c", SCENARIO, str(path), str(room)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_record_cut_short_never_lets_a_killed_object_be_named_back(tmp_path: Path) -> None:
    got = _run(tmp_path, room=20)
    assert 1 not in got["named"], got  # the killed object: its drop followed the torn record
    assert got["lost"], got  # said, and kept in memory only
    assert got["named"] == [], got  # nothing from a file given up


def test_a_record_that_fits_is_written_as_before(tmp_path: Path) -> None:
    got = _run(tmp_path, room=1 << 20)
    assert got == {"lost": "", "named": [2], "file": True}
