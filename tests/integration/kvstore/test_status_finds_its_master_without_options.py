"""`kvstore status` with neither --master nor --etcd (issue 43, section 5) asks, in this order,
KVSTORE_MASTER, then KVSTORE_ETCD (with KVSTORE_CLUSTER), then this host's master's own etcd settings
(KVSTORE_MASTER_ETCD, KVSTORE_MASTER_CLUSTER), then the local master's address (127.0.0.1 at
KVSTORE_MASTER_PORT, else 50051), and says on stderr which it asked. Real master processes, a real etcd,
the command run as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from kvstore.procs import kvstore_process
from tests.integration.kvstore.test_ha import HA, etcd_server

CLUSTER = "found"
NOWHERE = "127.0.0.1:9"  # (discard: nothing answers there as a master)


def status(**env: str) -> tuple[int, dict[str, Any] | None, str]:
    """`kvstore status --json` in an environment without any master or etcd variable but `env`: its exit
    status, the JSON it printed (None if none) and its stderr."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KVSTORE_MASTER", "KVSTORE_ETCD"))}
    clean.pop("KVSTORE_CLUSTER", None)
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "status", "--json", "--timeout", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**clean, **env},
    )
    said = json.loads(run.stdout) if run.returncode == 0 else None
    return run.returncode, said, run.stderr


@pytest.fixture
def masters(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(etcd's address, the address of a single master, the address of the leader of CLUSTER in etcd)."""
    with etcd_server(tmp_path, "127.0.0.1") as (etcd, _), ExitStack() as stack:
        _, single = stack.enter_context(kvstore_process(["master", "--port", "0"]))
        elected = ["master", "--port", "0", "--etcd", etcd, "--cluster", CLUSTER, *HA]
        _, candidate = stack.enter_context(kvstore_process(elected))
        yield etcd, single.split()[0], candidate.split()[0]


def test_status_asks_kvstore_master_then_etcd_then_the_masters_etcd_then_the_local_port(
    masters: tuple[str, str, str],
) -> None:
    etcd, single, leader = masters
    single_port = single.rpartition(":")[2]

    # KVSTORE_MASTER first, even with etcd settings beside it
    code, said, err = status(KVSTORE_MASTER=single, KVSTORE_ETCD=etcd, KVSTORE_CLUSTER=CLUSTER)
    assert code == 0 and said is not None and said["master"]["address"] == single, err
    assert f"asking KVSTORE_MASTER={single}" in err

    # then KVSTORE_ETCD (a client's settings), before this host's master's own
    code, said, err = status(KVSTORE_ETCD=etcd, KVSTORE_CLUSTER=CLUSTER, KVSTORE_MASTER_ETCD=NOWHERE)
    assert code == 0 and said is not None, err
    assert said["master"]["address"] == leader and said["master"]["role"] == "leader"
    assert f"asking KVSTORE_ETCD={etcd}, cluster {CLUSTER}" in err

    # then the master's own etcd settings, before its port
    code, said, err = status(
        KVSTORE_MASTER_ETCD=etcd, KVSTORE_MASTER_CLUSTER=CLUSTER, KVSTORE_MASTER_PORT=single_port
    )
    assert code == 0 and said is not None and said["master"]["address"] == leader, err
    assert f"asking KVSTORE_MASTER_ETCD={etcd} (this host's master's), cluster {CLUSTER}" in err

    # then the local master at its port
    code, said, err = status(KVSTORE_MASTER_PORT=single_port)
    assert code == 0 and said is not None and said["master"]["address"] == single, err
    assert f"asking {single}, the local master's address" in err

    # nothing set: 127.0.0.1:50051, said (whether a master answers there is not this test's)
    _, _, err = status()
    assert "asking 127.0.0.1:50051, the local master's address" in err

    # options still win over all of it
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "status", "--json", "--master", single],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "KVSTORE_MASTER": NOWHERE},
    )
    assert run.returncode == 0 and json.loads(run.stdout)["master"]["address"] == single, run.stderr
    assert "asking" not in run.stderr
