"""Where a cluster's masters meet in etcd: the leader key (held under the leader's lease, its value the
leader's RPC address) and one key per candidate. Masters campaign on it (kvstore.master.election);
clients and nodes read it to find the leader (kvstore.cluster.leader).

`etcd3` comes from the `etcd3-fc` distribution (plain etcd3 0.12 breaks on current protobuf); it is
imported only when a cluster is named.
"""

from __future__ import annotations

import json
from typing import Any

from kvstore.errors import InvalidArgumentError, MasterUnavailableError
from kvstore.rpc.framing import parse_address

ROOT = "/kvstore"


def leader_key(cluster: str) -> str:
    return f"{ROOT}/{cluster}/leader"


def candidates_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/candidates/"


def check_cluster(cluster: str) -> str:
    if not cluster or len(cluster) > 128 or not all(c.isalnum() or c in "._-" for c in cluster):
        raise InvalidArgumentError("a cluster name is 1-128 letters, digits, '.', '_' or '-'")
    return cluster


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """ "HOST:PORT[,HOST:PORT...]" of etcd's client endpoints."""
    endpoints = [parse_address(part.strip()) for part in text.split(",") if part.strip()]
    if not endpoints:
        raise InvalidArgumentError("no etcd endpoint: give HOST:PORT[,HOST:PORT...]")
    return endpoints


def connect(endpoints: str, timeout: float = 2.0) -> Any:
    """An etcd client over the endpoints (each call fails over to the next one)."""
    try:
        import etcd3
        from etcd3.client import Endpoint
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise InvalidArgumentError("etcd support needs the etcd3-fc package: pip install etcd3-fc") from exc
    points = [
        Endpoint(host, port, secure=False, time_retry=timeout) for host, port in parse_endpoints(endpoints)
    ]
    return etcd3.MultiEndpointEtcd3Client(endpoints=points, timeout=timeout, failover=True)


def leader_record(address: str, run_id: str) -> bytes:
    return json.dumps({"address": address, "id": run_id}).encode()


def read_record(value: bytes | None) -> dict[str, str] | None:
    """A leader or candidate key's value; None when absent or not one of ours."""
    if not value:
        return None
    try:
        record = json.loads(value)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("address"), str):
        return None
    return record


def leader_address(client: Any, cluster: str) -> str:
    """The leader's RPC address; MasterUnavailableError when no master leads the cluster."""
    try:
        value, _ = client.get(leader_key(cluster))
    except Exception as exc:  # grpc errors of every kind: etcd cannot be asked
        raise MasterUnavailableError(f"cannot ask etcd for the leader of cluster {cluster!r}: {exc}") from exc
    record = read_record(value)
    if record is None:
        raise MasterUnavailableError(f"no master leads cluster {cluster!r} now")
    return record["address"]
