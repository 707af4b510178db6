"""deploy/k8s's manifests validate against Kubernetes' own schemas (kubernetes-validate's, shipped in the
package: no network), strictly (an unknown field fails), for the oldest and newest version it knows that
has every API they use; and they agree with each other and with kvstore: selectors select their pods,
named ports exist, every KVSTORE_* variable is one kvstore reads (its servers refuse any other), every
kvstore command line parses with kvstore's own parser, and secret files stay owner-only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kvstore import cli
from kvstore.config.environment import known_variables
from tests.deploy.deploy_files import ALERTS, DEPLOY

K8S = DEPLOY / "k8s"
VERSIONS = ["1.27.0", "latest"]  # (policy/v1 PodDisruptionBudget: 1.21 on; the package ships 1.25 on)
NOT_CORE = {"ServiceMonitor", "PrometheusRule", "Kustomization"}  # CRDs, kustomize's file: checked below
WORKLOADS = {"StatefulSet", "DaemonSet", "Deployment"}


def manifests() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def of_kind(*kinds: str) -> list[dict[str, Any]]:
    return [doc for _, doc in manifests() if doc["kind"] in kinds]


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_matches_the_kubernetes_schema(version: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    wanted = kubernetes_validate.latest_version() if version == "latest" else version
    checked = []
    for name, doc in manifests():
        if doc["kind"] in NOT_CORE:
            continue
        try:
            kubernetes_validate.validate(doc, wanted, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name} {doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}")
        checked.append(doc["kind"])
    assert {"Namespace", "Service", "StatefulSet", "DaemonSet", "PodDisruptionBudget"} <= set(checked)


def test_the_kustomization_lists_every_manifest() -> None:
    (kustomization,) = of_kind("Kustomization")
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


def test_selectors_select_their_pods_and_named_ports_exist() -> None:
    workloads = of_kind(*WORKLOADS)
    for workload in workloads:
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
        ports = {p["name"] for c in containers(workload) for p in c.get("ports", [])}
        for container in containers(workload):
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in container:
                    assert container[probe]["httpGet"]["port"] in ports, (container["name"], probe)
    for budget in of_kind("PodDisruptionBudget"):
        selected = [w for w in workloads if _selects(budget["spec"]["selector"]["matchLabels"], w)]
        assert len(selected) == 1, budget["metadata"]["name"]
    services = of_kind("Service")
    for service in services:
        (workload,) = [w for w in workloads if _selects(service["spec"]["selector"], w)]
        ports = {p["name"] for c in containers(workload) for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, service["metadata"]["name"]
        if workload["kind"] == "StatefulSet":
            assert workload["spec"]["serviceName"] == service["metadata"]["name"]
    (monitor,) = of_kind("ServiceMonitor")
    (watched,) = [
        s for s in services if s["metadata"]["labels"] == monitor["spec"]["selector"]["matchLabels"]
    ]
    assert watched["metadata"]["name"] == "kvstore-master"  # the job name the alert rules select
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    assert "http" in {p["name"] for p in watched["spec"]["ports"]}


def test_the_prometheus_rule_holds_the_alert_rules_as_they_are() -> None:
    (rule,) = of_kind("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]


def _selects(selector: dict[str, str], workload: dict[str, Any]) -> bool:
    return selector.items() <= workload["spec"]["template"]["metadata"]["labels"].items()


def kvstore_containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for workload in of_kind(*WORKLOADS):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            if container["image"].startswith("kvstore-llm:"):
                yield workload, container


def test_kvstore_containers_use_only_settings_kvstore_reads() -> None:
    known = known_variables()
    seen = 0
    for _, container in kvstore_containers():
        env = {e["name"]: e.get("value", "10.0.0.7") for e in container["env"]}
        unknown = {n for n in env if n.startswith("KVSTORE_")} - set(known)
        assert unknown == set(), container["name"]
        args = [_expanded(a, env) for a in container["args"]]
        parsed = cli.build_parser()[0].parse_args(args)  # (exits, failing the test, on a bad option)
        assert parsed is not None
        seen += 1
    assert seen == 2  # the masters and the nodes


def _expanded(arg: str, env: dict[str, str]) -> str:
    """`arg` with Kubernetes' $(VAR) references replaced by the container's variables."""
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)


def test_masters_probe_health_on_their_http_port() -> None:
    for workload, container in kvstore_containers():
        args = container["args"]
        if args[0] != "master":
            continue
        http = args[args.index("--http-port") + 1]
        port = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
        assert str(port) == http
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/health"
        assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] >= 2


def test_kvstore_runs_as_non_root_and_its_secret_file_stays_owner_only() -> None:
    for workload, container in kvstore_containers():
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        # an fsGroup makes a Secret volume's files group-readable, which kvstore refuses
        assert "fsGroup" not in pod["securityContext"]
        secret_volumes = [v for v in pod["volumes"] if "secret" in v]
        assert secret_volumes and all(v["secret"]["defaultMode"] == 0o400 for v in secret_volumes)
        path = {e["name"]: e.get("value") for e in container["env"]}["KVSTORE_CLUSTER_SECRET_FILE"]
        (copier,) = pod["initContainers"]
        # (the copy itself runs in test_k8s_secret_copy_runs_with_its_granted_capabilities)
        assert copier["command"][:2] == ["sh", "-c"] and "chown 10001:10001" in copier["command"][2]
        assert copier["command"][-1] == path
        assert str(pod["securityContext"]["runAsUser"]) == "10001"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        # ... so /tmp is a volume: without a writable temporary directory a node cannot start (tried:
        # uid 10001, a read-only root in a mount namespace; tempfile.gettempdir() raises)
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        (tmp,) = [v for v in pod["volumes"] if v["name"] == mounts["/tmp"]]
        assert "emptyDir" in tmp
