"""HA that monitoring sees (issue 43, section 5), with a real etcd and real master processes: a standby
answers /health (200, role standby, the leader it sees) and /metrics (kvstore_master_is_leader 0) from
the moment it campaigns, the leader says leader (1); once the leader is killed the standby's role turns to
leader and the epoch both report grows. A leader's /health/leader is 200, a standby's 503."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import kvstore
from kvstore.procs import kvstore_process
from kvstore.rpc.messages import PROTOCOL_VERSION
from tests.integration.kvstore.test_ha import HA, etcd_server, leader_of

CLUSTER = "watched"
Samples = dict[str, list[tuple[dict[str, str], float]]]  # a /metrics page: by name, (labels, value)


class Candidate:
    """A candidate master process: its RPC address and its /metrics and /health address."""

    def __init__(self, proc: subprocess.Popen[str], ready: str) -> None:
        fields = ready.split()
        self.proc, self.address = proc, fields[0]
        self.http = fields[1].removeprefix("http=")

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://{self.http}{path}", timeout=5) as reply:
                return reply.status, reply.read()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read()

    def health(self, path: str = "/health") -> tuple[int, dict[str, Any]]:
        status, body = self.get(path)
        return status, json.loads(body)

    def samples(self) -> Samples:
        """Every sample of /metrics by name: (labels, value)."""
        status, body = self.get("/metrics")
        assert status == 200
        found: Samples = {}
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                found.setdefault(sample.name, []).append((sample.labels, sample.value))
        return found


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    matching = [v for got, v in samples[name] if labels.items() <= got.items()]
    assert len(matching) == 1, (name, labels, samples.get(name))
    return matching[0]


def names_leader(samples: Samples, leader: str) -> bool:
    """The page's kvstore_master_leader_info names `leader`."""
    return any(got.get("leader") == leader and v == 1 for got, v in samples["kvstore_master_leader_info"])


def until(check: Any, seconds: float, what: str) -> Any:
    """Polls `check` until it returns something true (returned), failing after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


class Candidates:
    """Candidate masters of CLUSTER in a real etcd, each with its own HTTP port."""

    def __init__(self, stack: ExitStack, etcd_address: str, *options: str) -> None:
        """`options`: the candidates' own, after (so over) the HA tests' settings."""
        self.stack, self.all = stack, list[Candidate]()
        where = ["--etcd", etcd_address, "--cluster", CLUSTER]
        self.args = ["master", "--port", "0", "--http-port", "0", *where, *HA, *options]

    def start(self) -> Candidate:
        candidate = Candidate(*self.stack.enter_context(kvstore_process(self.args)))
        self.all.append(candidate)
        return candidate


@pytest.fixture
def candidates(tmp_path: Path) -> Iterator[Candidates]:
    """Two candidates started."""
    with etcd_server(tmp_path, "127.0.0.1") as (etcd_address, _), ExitStack() as stack:
        found = Candidates(stack, etcd_address)
        for _ in range(2):
            candidate = found.start()
            # it answers as soon as it says it campaigns, whichever it turns out to be
            status, health = candidate.health()
            assert status == 200 and health["role"] in ("standby", "leader"), health
        yield found


def roles(candidates: list[Candidate]) -> tuple[Candidate, Candidate]:
    """(leader, standby) of two, once one leads."""
    leader_proc, _ = leader_of([(c.proc, c.address) for c in candidates])
    leader = next(c for c in candidates if c.proc is leader_proc)
    return leader, next(c for c in candidates if c is not leader)


def test_a_standby_says_standby_and_a_failover_shows_in_role_and_epoch(candidates: Candidates) -> None:
    leader, standby = roles(candidates.all)
    status, said = leader.health()
    assert status == 200 and said["role"] == "leader" and said["status"] == "ok", said
    assert said["leader"] == leader.address and said["cluster"] == CLUSTER and said["shard"] == 0
    epoch = said["epoch"]
    assert epoch > 0 and "objects" in said  # (the leading master's own health)

    def standby_sees_the_leader() -> dict[str, Any] | None:
        code, body = standby.health()
        assert code == 200, body
        return body if body["leader"] == leader.address else None

    seen = until(standby_sees_the_leader, 10, "the standby never named the leader")
    assert seen["role"] == "standby" and seen["epoch"] == epoch and seen["cluster"] == CLUSTER, seen
    assert seen["address"] == standby.address and "objects" not in seen
    assert leader.health("/health/leader")[0] == 200
    assert standby.health("/health/leader") == (503, seen)

    on_leader, on_standby = leader.samples(), standby.samples()
    where = {"cluster": CLUSTER, "shard": "0"}
    assert value(on_leader, "kvstore_master_is_leader", **where) == 1
    assert value(on_standby, "kvstore_master_is_leader", **where) == 0
    assert value(on_leader, "kvstore_master_role", role="leader") == 1
    assert value(on_standby, "kvstore_master_role", role="standby") == 1
    assert value(on_standby, "kvstore_master_role", role="leader") == 0
    assert value(on_leader, "kvstore_master_epoch") == value(on_standby, "kvstore_master_epoch") == epoch
    assert value(on_standby, "kvstore_master_leader_info", leader=leader.address) == 1
    until(lambda: value(leader.samples(), "kvstore_master_standbys") == 1, 10, "the leader saw no standby")
    for samples in (on_leader, on_standby):
        build = value(samples, "kvstore_build_info", version=kvstore.__version__)
        assert build == 1
        assert samples["kvstore_build_info"][0][0]["protocol"] == str(PROTOCOL_VERSION)
    assert "kvstore_objects" in on_leader and "kvstore_objects" not in on_standby
    assert "kvstore_master_standbys" not in on_standby

    # a standby scraped only at /metrics (never asked /health) learns the leader and its epoch too
    scraped = candidates.start()
    until(
        lambda: names_leader(scraped.samples(), leader.address),
        10,
        "a standby asked only for /metrics never named the leader",
    )
    assert value(scraped.samples(), "kvstore_master_epoch") == epoch

    leader.proc.send_signal(signal.SIGKILL)
    leader.proc.wait()

    def one_leads() -> tuple[Candidate, Samples] | None:
        for candidate in (standby, scraped):
            samples = candidate.samples()
            if value(samples, "kvstore_master_is_leader") == 1:
                return candidate, samples
        return None

    new, after = until(one_leads, 20, "no standby ever reported that it leads")
    assert value(after, "kvstore_master_epoch") > epoch
    assert value(after, "kvstore_master_leader_info", leader=new.address) == 1
    assert value(after, "kvstore_master_role", role="leader") == 1
    status, said = new.health("/health/leader")
    assert status == 200 and said["role"] == "leader" and said["leader"] == new.address, said
    assert said["epoch"] == value(after, "kvstore_master_epoch") and said["status"] == "ok"
    other = scraped if new is standby else standby
    until(
        lambda: names_leader(other.samples(), new.address),
        10,
        "the remaining standby never named the new leader",
    )
    still = other.samples()
    assert value(still, "kvstore_master_is_leader") == 0
    assert value(still, "kvstore_master_epoch") == said["epoch"]
    assert other.health("/health/leader")[0] == 503
