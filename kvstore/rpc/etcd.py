"""Where a cluster's masters meet in etcd: the leader key (held under the leader's lease, its value the
leader's signed record: kvstore.rpc.etcd_records) and one key per candidate. Masters campaign on it
(kvstore.master.election); clients and nodes read it to find the leader (kvstore.cluster.leader).

The connection speaks TLS and logs in when kvstore.config.etcd says so. `etcd3` comes from the
`etcd3-fc` distribution (plain etcd3 0.12 breaks on current protobuf); it is imported only when a
cluster is named.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kvstore.errors import InvalidArgumentError, MasterUnavailableError, PermissionDeniedError
from kvstore.rpc.framing import parse_address
from transfer_engine.security import is_loopback

if TYPE_CHECKING:
    from kvstore.config.etcd import EtcdConfig

log = logging.getLogger("kvstore.cluster")

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


START_SAY_SECONDS = 10.0  # how often a start waiting for etcd says it still waits
_T = TypeVar("_T")


def when_up(first: Callable[[], _T], endpoints: str, seconds: float) -> _T:
    """`first` (a starting master's or node's first etcd request), tried again while etcd cannot be
    reached, for up to `seconds`: etcd started beside it (a Kubernetes apply, a host's boot) answers a
    little later, and a process that exited at once would be restarted with a growing back-off. Said on
    the log when it starts waiting and every START_SAY_SECONDS; then the last failure is raised. Only an
    etcd out of reach is waited for (MasterUnavailableError caused by etcd's own error): a refused login
    or a shard map that disagrees is raised at once."""
    deadline = time.monotonic() + seconds
    said = 0.0
    while True:
        try:
            return first()
        except MasterUnavailableError as exc:
            left = deadline - time.monotonic()
            if exc.__cause__ is None or left <= 0:
                raise
            if time.monotonic() - said >= START_SAY_SECONDS:
                said = time.monotonic()
                log.warning(
                    "etcd %s does not answer yet (%s); waiting up to %.0f s more (KVSTORE_ETCD_START_WAIT)",
                    endpoints,
                    explain(exc.__cause__),
                    left,
                )
            time.sleep(min(1.0, max(left, 0.0)))


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


class KeyWatch:
    """Wakes a waiter as soon as one etcd key changes (put or deleted), so a standby or a node learns of a
    leader's end or a new leader at once instead of at its next poll. The watch is made at the first wait
    (an idle process holds none) and made again when it ends (etcd restarted, the connection failed over,
    the login was lost); while it cannot be made, at most once per REWATCH_SECONDS, a wait sleeps its
    whole time: callers always poll as well, so a lost watch costs latency, never correctness.

    `client_of()`: the etcd client to watch with, as it is now (its owner may replace it)."""

    REWATCH_SECONDS = 1.0

    def __init__(self, client_of: Callable[[], Any], key: str) -> None:
        self._client_of, self.key = client_of, key
        self._changed = threading.Event()
        self._lock = threading.Lock()
        self._watching: tuple[Any, int] | None = None  # (client, watch id) while a watch is alive
        self._tried = -float("inf")  # monotonic: the last try to make the watch
        self._closed = False

    def wait(self, seconds: float) -> bool:
        """Up to `seconds`; True when woken by a change of the key (or the watch ended, or close): the
        caller reads the key again."""
        self._arm()
        woken = self._changed.wait(seconds)
        self._changed.clear()
        return woken

    @property
    def watching(self) -> bool:
        return self._watching is not None

    def _arm(self) -> None:
        with self._lock:
            if self._watching is not None or self._closed:
                return
            if time.monotonic() - self._tried < self.REWATCH_SECONDS:
                return
            self._tried = time.monotonic()
            try:
                client = self._client_of()
                on_response = functools.partial(self._on_response, client)
                self._watching = (client, client.add_watch_callback(self.key, on_response))
            except Exception as exc:  # etcd out of reach, a timeout: the caller polls meanwhile
                log.debug("cannot watch %s: %s", self.key, explain(exc))

    def _on_response(self, client: Any, response: Any) -> None:
        """etcd3's watch thread: events of the key, or the end of the watch made on `client` (an error,
        or None)."""
        if not hasattr(response, "events"):
            with self._lock:
                if self._watching is not None and self._watching[0] is client:
                    self._watching = None
            log.debug("the watch of %s ended: %s", self.key, response)
        self._changed.set()

    def wake(self) -> None:
        """Ends a wait now, as a change of the key would."""
        self._changed.set()

    def close(self) -> None:
        """Ends the watch and wakes a waiter."""
        with self._lock:
            self._closed = True
            watching, self._watching = self._watching, None
        self._changed.set()
        if watching is not None:
            client, watch_id = watching
            try:
                client.cancel_watch(watch_id)
            except Exception as exc:  # the connection is gone already
                log.debug("cancelling the watch of %s: %s", self.key, explain(exc))


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
