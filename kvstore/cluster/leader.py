"""Finding the master that leads: from etcd (the cluster's leader key, kvstore.rpc.etcd) or from a
comma-separated list of master addresses (the one that accepts a connection: standbys do not listen).
MasterClient asks again whenever it opens a connection, so a call after a failover reaches the new
leader with no user code; a process that lost its master waits for news of the next one
(Locator.wait_for_news: with etcd, a watch of the leader key) rather than a fixed pause."""

from __future__ import annotations

import logging
import threading
from typing import Any

from kvstore.config.etcd import EtcdConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import MasterUnavailableError
from kvstore.rpc import etcd, parse_address
from kvstore.rpc.etcd_records import LEADER, Records

log = logging.getLogger("kvstore.cluster")


class Locator:
    """The addresses to try, best first, each time a connection is opened."""

    def candidates(self) -> list[str]:
        raise NotImplementedError

    def connected(self, address: str) -> None:
        """`address` answered: try it first next time."""

    def describe(self) -> str:
        raise NotImplementedError

    def wait_for_news(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Waits up to `seconds`, less when there is news of the leader (True: ask the candidates again
        now) or `stop` is set (its owner closes: see wake). A list of addresses has no news: it waits."""
        (stop or threading.Event()).wait(seconds)
        return False

    def wake(self) -> None:
        """Ends a wait for news now (its owner closes and has set the wait's `stop`)."""

    def close(self) -> None:
        """Lets go of what finding the leader holds (an etcd connection)."""


class AddressList(Locator):
    def __init__(self, addresses: str) -> None:
        self.addresses = [a.strip() for a in addresses.split(",") if a.strip()]
        for address in self.addresses:
            parse_address(address)
        self._first = 0

    def candidates(self) -> list[str]:
        return self.addresses[self._first :] + self.addresses[: self._first]

    def connected(self, address: str) -> None:
        if address in self.addresses:
            self._first = self.addresses.index(address)

    def describe(self) -> str:
        return ",".join(self.addresses)


class EtcdLeader(Locator):
    """The leader etcd names for `cluster` (one lookup per connection opened). Its record must verify
    (kvstore.rpc.etcd_records: signed with the cluster secret, under the lease it names); one that does
    not is ignored: the leader last trusted is tried instead, or none."""

    def __init__(
        self,
        endpoints: str,
        cluster: str,
        timeout: float = 2.0,
        settings: EtcdConfig | None = None,
        secret: bytes | None = None,
    ) -> None:
        """`settings`: etcd's TLS and login (from KVSTORE_ETCD_* if None); `secret`: the cluster secret
        records are signed with (from the environment if None)."""
        self.endpoints, self.cluster = endpoints, etcd.check_cluster(cluster, shard_of_one=True)
        etcd.parse_endpoints(endpoints)
        self.timeout = timeout
        self.settings = settings or EtcdConfig.load()
        self.records = Records(SecurityConfig.load().secret() if secret is None else secret, cluster)
        self._client: Any = None
        self._trusted = ""  # the address of the last leader whose record verified
        self._ignored = 0  # the revision of the last record ignored (said once)
        self._lock = threading.Lock()
        # (made at the first wait for news: a process whose master never failed watches nothing)
        self._leader_key = etcd.KeyWatch(self._connected, etcd.leader_key(self.cluster))

    def _connected(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = etcd.connect(self.endpoints, self.timeout, self.settings)
            return self._client

    def wait_for_news(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Up to `seconds`, less once the leader key changes in etcd (the leader's end, a new leader) or
        wake is called."""
        return self._leader_key.wait(seconds)

    def wake(self) -> None:
        self._leader_key.wake()

    def candidates(self) -> list[str]:
        with self._lock:
            if self._client is None:
                self._client = etcd.connect(self.endpoints, self.timeout, self.settings)
            try:
                value, meta = self._client.get(etcd.leader_key(self.cluster))
            except Exception as exc:  # grpc errors of every kind: etcd cannot be asked
                if etcd.needs_login(exc):  # etcd forgot the login (it restarted): log in again next time
                    self._drop()
                raise MasterUnavailableError(
                    f"cannot ask etcd for the leader of cluster {self.cluster!r}: {etcd.explain(exc)}"
                ) from exc
            if value is None:
                raise MasterUnavailableError(f"no master leads cluster {self.cluster!r} now")
            record = self.records.decode(LEADER, value, meta.lease_id)
            if record is not None:
                self._trusted = record.address
                return [record.address]
            if self._ignored != meta.mod_revision:
                self._ignored = meta.mod_revision
                log.warning(
                    "the leader record of cluster %r in etcd does not verify (%s): ignored",
                    self.cluster,
                    "not signed with this cluster's secret" if self.records.signed else "not under its lease",
                )
            if self._trusted:
                return [self._trusted]
            raise MasterUnavailableError(
                f"the leader record of cluster {self.cluster!r} in etcd does not verify: no leader to follow"
            )

    def describe(self) -> str:
        return f"the leader of cluster {self.cluster!r} (etcd {self.endpoints})"

    def read(self, key: str) -> bytes | None:
        """`key`'s value in etcd over this locator's own connection (opened if need be): what a client
        reads before it follows the leader (the shard map) costs no connection of its own. etcd's errors
        are raised as they come."""
        with self._lock:
            if self._client is None:
                self._client = etcd.connect(self.endpoints, self.timeout, self.settings)
            value, _ = self._client.get(key)
            return value

    def _drop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        self._leader_key.close()
        with self._lock:
            self._drop()


def locator(master: str = "", etcd_endpoints: str = "", cluster: str = "", timeout: float = 2.0) -> Locator:
    """etcd when `etcd_endpoints` is given (with `cluster`), else the master address list."""
    if etcd_endpoints:
        return EtcdLeader(etcd_endpoints, cluster or "default", timeout)
    return AddressList(master)
