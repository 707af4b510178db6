"""A master's /health answers within a probe's default timeout (Kubernetes: 1 s) while etcd does not
answer, leader and standby alike, so a paused or partitioned etcd never has kubelet restart the masters;
once the leader's lease can no longer be renewed it says standby (monitoring sees no leader, as is true),
and when etcd is back one leads again. A real etcd, SIGSTOPped, and real candidate processes.

The leader TTL is 8 s here: a master's etcd calls then give up after 1 s (kvstore.master.wire.election's
timeout, a quarter of the TTL up to 1 s), so a probe that waited for its etcd read would take the whole
probe timeout; it waits kvstore.master.wire.role.WAIT_SECONDS at most."""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack
from pathlib import Path

from tests.integration.kvstore.test_ha import etcd_server
from tests.integration.kvstore.test_standby_masters_serve_health_and_metrics import (
    Candidates,
    roles,
    until,
)

PROBE_TIMEOUT = 1.0  # Kubernetes' default timeoutSeconds
TTL = 8  # the leader's lease (seconds)


def test_health_answers_at_once_while_etcd_is_paused(tmp_path: Path) -> None:
    with etcd_server(tmp_path, "127.0.0.1") as (address, etcd), ExitStack() as stack:
        candidates = Candidates(stack, address, "--leader-ttl", str(TTL))
        for _ in range(2):
            candidates.start()
        leader, standby = roles(candidates.all)
        until(lambda: standby.health()[1]["leader"] == leader.address, 10, "the standby never saw the leader")

        etcd.send_signal(signal.SIGSTOP)
        try:
            paused = time.monotonic()
            said: dict[str, str] = {}
            while time.monotonic() - paused < TTL + 2:  # past the leader's lease: it must step down
                for candidate in (leader, standby):
                    began = time.monotonic()
                    status, health = candidate.health()
                    took = time.monotonic() - began
                    assert status == 200 and took < PROBE_TIMEOUT, (candidate.address, took, health)
                    said[candidate.address] = health["role"]
                time.sleep(0.2)
            assert said == {leader.address: "standby", standby.address: "standby"}, said
        finally:
            etcd.send_signal(signal.SIGCONT)

        until(
            lambda: sorted(c.health()[1]["role"] for c in (leader, standby)) == ["leader", "standby"],
            20,
            "no master led again once etcd was back",
        )
