"""A real Prometheus (Debian's) scrapes a live cluster (etcd, a leader and a standby master, a node, a
client that puts and gets over tcp) with deploy/prometheus's rules loaded: every metric the Grafana
dashboard and the alert rules read exists, every dashboard query returns data, every alert expression
evaluates without error and none fires on the healthy cluster, and the standby shows as standby. Then the
leader is killed: the standby shows as leader and KVStoreMasterFailover fires; then etcd is stopped: the
last master steps down and KVStoreNoLeader fires."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvstore import Store
from kvstore.procs import kvstore_process
from tests.deploy.conftest import require_tool
from tests.deploy.deploy_files import ALERTS, dashboard_expressions, metric_names, rule_expressions
from tests.integration.kvstore.test_ha import etcd_server

JOB = "kvstore-master"  # the job name the rules expect (deploy/prometheus/prometheus.yml)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def prometheus(tmp_path: Path, targets: list[str]) -> Iterator[str]:
    """Prometheus on a free loopback port scraping `targets` every second, the alert rules loaded; yields
    its base URL once ready."""
    binary = require_tool("prometheus", "Debian's prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(url + "/-/ready"):
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "Prometheus did not get ready in 60 s"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def api(url: str, path: str, **params: str) -> Any:
    """A Prometheus HTTP API call's data; an error reply fails the test with Prometheus' words."""
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}/api/v1/{path}?{query}", timeout=10) as reply:
            body = json.load(reply)
    except urllib.error.HTTPError as exc:
        body = json.load(exc)
    assert body["status"] == "success", (path, params, body)
    return body["data"]


@contextmanager
def ha_cluster_with_metrics(etcd: str, cluster: str) -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Two candidate masters of `cluster` serving /metrics, and a node; yields the masters by HTTP address."""
    with ExitStack() as stack:
        masters = {}
        for _ in range(2):
            args = ["master", "--port", "0", "--http-port", "0", "--etcd", etcd, "--cluster", cluster]
            proc, ready = stack.enter_context(kvstore_process([*args, "--leader-ttl", "3"]))
            fields = dict(f.split("=", 1) for f in ready.split()[1:])
            masters[fields["http"]] = proc
        node = ["node", "--etcd", etcd, "--cluster", cluster, "--segment-size", "32MiB"]
        stack.enter_context(kvstore_process(node))
        yield masters


def _empty_queries(url: str, expressions: dict[str, str]) -> dict[str, str]:
    return {w: e for w, e in expressions.items() if not api(url, "query", query=e)["result"]}


@pytest.mark.prometheus
def test_prometheus_scraping_a_live_cluster_finds_every_series_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_tool("prometheus", "Debian's prometheus")
    monkeypatch.setenv("KVSTORE_TRANSPORT", "tcp")  # (paths per NIC are tcp's and ucx's)
    panels = {w: e for w, e in dashboard_expressions().items() if not w.startswith("annotation")}
    others = {w: e for w, e in dashboard_expressions().items() if w.startswith("annotation")}
    others.update(rule_expressions())
    with (
        etcd_server(tmp_path, "127.0.0.1") as (etcd, etcd_process),
        ha_cluster_with_metrics(etcd, "prom") as masters,
        Store.connect(etcd=etcd, cluster="prom", transport="tcp") as store,
        prometheus(tmp_path, list(masters)) as url,
    ):
        for i in range(40):
            store.put(f"prom/{i}", bytes([i]) * 65536)
        assert [store.get(f"prom/{i}") for i in range(40)] == [bytes([i]) * 65536 for i in range(40)]
        assert store.get("prom/absent") is None  # a miss
        deadline = time.monotonic() + 90
        while (empty := _empty_queries(url, panels)) and time.monotonic() < deadline:
            time.sleep(1)  # (rates need two scrapes; paths come with the client's heartbeats)

        names = set(api(url, "label/__name__/values"))
        used = {n for e in [*panels.values(), *others.values()] for n in metric_names(e)}
        assert used - names == set(), "series the dashboard or rules use that Prometheus never scraped"
        assert empty == {}, "dashboard queries with no data on a live cluster"
        for expr in others.values():
            api(url, "query", query=expr)  # (alerts are quiet on a healthy cluster: no data expected)
        rules = [r for g in api(url, "rules")["groups"] for r in g["rules"]]
        assert len(rules) == len(rule_expressions())
        assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
        assert [
            a["labels"]["alertname"] for a in api(url, "alerts")["alerts"] if a["state"] == "firing"
        ] == []
        roles = _roles(url)
        assert sorted(roles.values()) == ["leader", "standby"] and set(roles) == set(masters)
        leaders = api(
            url, "query", query='sum by (cluster, shard) (kvstore_master_is_leader{cluster="prom"})'
        )
        assert [float(r["value"][1]) for r in leaders["result"]] == [1.0]

        (leader,) = [at for at, role in roles.items() if role == "leader"]
        masters[leader].kill()
        deadline = time.monotonic() + 60
        while not _firing(url, "KVStoreMasterFailover") and time.monotonic() < deadline:
            time.sleep(1)
        assert _firing(url, "KVStoreMasterFailover") == [
            {"alertname": "KVStoreMasterFailover", "cluster": "prom", "shard": "0", "severity": "warning"}
        ]
        (standby,) = set(masters) - {leader}
        assert _roles(url)[standby] == "leader"

        etcd_process.kill()  # (the leader cannot renew its lease: it steps down and stands by)
        deadline = time.monotonic() + 90
        while not _firing(url, "KVStoreNoLeader") and time.monotonic() < deadline:
            time.sleep(1)
        no_leader = {"alertname": "KVStoreNoLeader", "cluster": "prom", "shard": "0", "severity": "critical"}
        assert _firing(url, "KVStoreNoLeader") == [no_leader]
        assert _roles(url) == {standby: "standby"}


def _roles(url: str) -> dict[str, str]:
    """Each scraped master's role as Prometheus last saw it, by instance."""
    found = api(url, "query", query='kvstore_master_role{cluster="prom"} == 1')["result"]
    return {r["metric"]["instance"]: r["metric"]["role"] for r in found}


def _firing(url: str, name: str) -> list[dict[str, str]]:
    alerts = api(url, "alerts")["alerts"]
    return [a["labels"] for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]
