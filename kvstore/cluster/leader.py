"""Finding the master that leads: from etcd (the cluster's leader key, kvstore.rpc.etcd) or from a
comma-separated list of master addresses (the one that accepts a connection: standbys do not listen).
MasterClient asks again whenever it opens a connection, so a call after a failover reaches the new
leader with no user code."""

from __future__ import annotations

import threading
from typing import Any

from kvstore.rpc import etcd, parse_address


class Locator:
    """The addresses to try, best first, each time a connection is opened."""

    def candidates(self) -> list[str]:
        raise NotImplementedError

    def connected(self, address: str) -> None:
        """`address` answered: try it first next time."""

    def describe(self) -> str:
        raise NotImplementedError

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
    """The leader etcd names for `cluster` (one lookup per connection opened)."""

    def __init__(self, endpoints: str, cluster: str, timeout: float = 2.0) -> None:
        self.endpoints, self.cluster = endpoints, etcd.check_cluster(cluster)
        etcd.parse_endpoints(endpoints)
        self.timeout = timeout
        self._client: Any = None
        self._lock = threading.Lock()

    def candidates(self) -> list[str]:
        with self._lock:
            if self._client is None:
                self._client = etcd.connect(self.endpoints, self.timeout)
            return [etcd.leader_address(self._client, self.cluster)]

    def describe(self) -> str:
        return f"the leader of cluster {self.cluster!r} (etcd {self.endpoints})"

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None


def locator(master: str = "", etcd_endpoints: str = "", cluster: str = "", timeout: float = 2.0) -> Locator:
    """etcd when `etcd_endpoints` is given (with `cluster`), else the master address list."""
    if etcd_endpoints:
        return EtcdLeader(etcd_endpoints, cluster or "default", timeout)
    return AddressList(master)
