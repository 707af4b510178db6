"""Where a cluster's masters meet in etcd: the leader key (held under the leader's lease, its value the
leader's signed record: kvstore.rpc.etcd_records) and one key per candidate. Masters campaign on it
(kvstore.master.election); clients and nodes read it to find the leader (kvstore.cluster.leader).

The connection speaks TLS and logs in when kvstore.config.etcd says so. `etcd3` comes from the
`etcd3-fc` distribution (plain etcd3 0.12 breaks on current protobuf); it is imported only when a
cluster is named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvstore.errors import InvalidArgumentError, MasterUnavailableError, PermissionDeniedError
from kvstore.rpc.framing import parse_address
from transfer_engine.security import is_loopback

if TYPE_CHECKING:
    from kvstore.config.etcd import EtcdConfig

ROOT = "/kvstore"
MAX_SHARDS = 256  # the most shards a cluster's key space is split over


def leader_key(cluster: str) -> str:
    return f"{ROOT}/{cluster}/leader"


def candidates_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/candidates/"


def shards_key(cluster: str) -> str:
    """The shard map of a cluster split over shards: how many (absent: one, today's cluster)."""
    return f"{ROOT}/{cluster}/shards"


SHARD_INFIX = ".shard-"  # (a shard's name: no cluster's own name may hold it, so none is taken for one)
MAX_CLUSTER_CHARS = 128


def shard_cluster(cluster: str, shard: int, shards: int) -> str:
    """The name shard `shard` of `shards` elects its leader under (its own leader and candidate keys,
    so a failover stays within the shard); one shard is the cluster itself."""
    if not 1 <= shards <= MAX_SHARDS or not 0 <= shard < shards:
        raise InvalidArgumentError(
            f"shard must be 0..{shards - 1} of 1..{MAX_SHARDS} shards, got {shard} of {shards}"
        )
    if shards == 1:
        return cluster
    name = f"{cluster}{SHARD_INFIX}{shard}"
    if len(name) > MAX_CLUSTER_CHARS:
        raise InvalidArgumentError(
            f"cluster name {cluster!r} is too long to split over shards: its shards' names ({name!r}) pass "
            f"{MAX_CLUSTER_CHARS} characters"
        )
    return name


def check_cluster(cluster: str, shard_of_one: bool = False) -> str:
    """A cluster's name as given; `shard_of_one`: or a shard's name (shard_cluster) as well."""
    if not cluster or len(cluster) > MAX_CLUSTER_CHARS or not all(c.isalnum() or c in "._-" for c in cluster):
        raise InvalidArgumentError("a cluster name is 1-128 letters, digits, '.', '_' or '-'")
    if SHARD_INFIX in cluster and not shard_of_one:
        raise InvalidArgumentError(
            f"a cluster name may not hold {SHARD_INFIX!r}: it names the shards of a cluster split over shards"
        )
    return cluster


def parse_endpoints(text: str) -> list[tuple[str, int]]:
    """ "HOST:PORT[,HOST:PORT...]" of etcd's client endpoints."""
    endpoints = [parse_address(part.strip()) for part in text.split(",") if part.strip()]
    if not endpoints:
        raise InvalidArgumentError("no etcd endpoint: give HOST:PORT[,HOST:PORT...]")
    return endpoints


def connect(endpoints: str, timeout: float = 2.0, settings: EtcdConfig | None = None) -> Any:
    """An etcd client over the endpoints (each call fails over to the next one), speaking TLS and logged
    in as `settings` say (None: plaintext, no login). A refused login is PermissionDeniedError; etcd out
    of reach while logging in, MasterUnavailableError."""
    try:
        import etcd3
        import grpc
        from etcd3.client import Endpoint
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise InvalidArgumentError("etcd support needs the etcd3-fc package: pip install etcd3-fc") from exc
    hosts = parse_endpoints(endpoints)
    login = settings.credentials() if settings is not None else None
    creds = _tls_credentials(settings) if settings is not None and settings.secure() else None
    if login and creds is None and not all(is_loopback(host) for host, _ in hosts):
        raise PermissionDeniedError(
            f"the etcd password would cross the network in plaintext to {endpoints}: "
            "set KVSTORE_ETCD_CA (etcd serving TLS)"
        )
    points = [
        Endpoint(host, port, secure=creds is not None, creds=creds, time_retry=timeout)
        for host, port in hosts
    ]
    user, password = login if login else (None, None)
    try:
        return etcd3.MultiEndpointEtcd3Client(
            endpoints=points, timeout=timeout, failover=True, user=user, password=password
        )
    except grpc.RpcError as exc:
        for point in points:
            point.close()
        raise _login_refused(exc, endpoints, user or "") from exc


def needs_login(exc: BaseException) -> bool:
    """etcd no longer knows the connection's login (it restarted, or the token went unused too long):
    connect again."""
    code = getattr(exc, "code", None)
    if not callable(code):
        return False
    try:
        return getattr(code(), "name", "") == "UNAUTHENTICATED"
    except Exception:  # an exception whose code() wants arguments: not grpc's
        return False


def explain(exc: BaseException) -> str:
    """One line for an etcd call's failure (grpc's own text spans lines and repeats itself)."""
    code, details = getattr(exc, "code", None), getattr(exc, "details", None)
    if callable(code) and callable(details):
        try:
            return f"{getattr(code(), 'name', code())}: {details()}"
        except Exception:  # not grpc's
            pass
    return str(exc) or type(exc).__name__


def _tls_credentials(settings: EtcdConfig) -> Any:
    import grpc

    def read(path: str) -> bytes | None:
        if not path:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise InvalidArgumentError(f"{path}: {exc.strerror or exc}") from exc

    return grpc.ssl_channel_credentials(read(settings.ca), read(settings.key), read(settings.cert))


def _login_refused(exc: Any, endpoints: str, user: str) -> Exception:
    code = getattr(exc.code(), "name", "")
    said = exc.details() or code
    if code in ("INVALID_ARGUMENT", "UNAUTHENTICATED", "PERMISSION_DENIED"):
        return PermissionDeniedError(f"etcd at {endpoints} refused user {user!r}: {said}")
    if code == "FAILED_PRECONDITION":
        return PermissionDeniedError(
            f"etcd at {endpoints} has authentication off ({said}): anyone who reaches it may write the "
            "cluster's keys; enable it (etcd auth enable) or unset KVSTORE_ETCD_USER"
        )
    return MasterUnavailableError(f"cannot log in to etcd at {endpoints}: {said}")
