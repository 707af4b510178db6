"""A master's candidacy in etcd: campaign for the cluster's leader key, hold it, give it up.

The leader key lives under the candidate's lease (leader_ttl seconds). The leader renews the lease a
few times per TTL and knows until when it surely holds it: the time it *sent* its last successful
renewal plus the TTL (etcd counts from when it received it, later). It stops serving a margin before
that instant, so a standby, which can win only once etcd has let the lease expire, never leads while the
old leader still serves: no two leaders at any time, even when etcd or the network between them fails.

The epoch of a leadership is the etcd revision that created its leader key: it grows with each new
leader, and clients refuse to follow a leader older than one they have seen (kvstore.cluster.master_client).

Blocking (gRPC) calls: the server runs these methods on threads of their own.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from kvstore.rpc import etcd

log = logging.getLogger("kvstore.master")

POLL_SECONDS = 0.2  # how often a standby looks at the leader key


class Election:
    def __init__(self, endpoints: str, cluster: str, address: str, ttl: int) -> None:
        self.cluster, self.address, self.ttl = etcd.check_cluster(cluster), address, ttl
        self.key = etcd.leader_key(cluster)
        self.run_id = uuid.uuid4().hex  # this process's candidacy (a restarted one is another)
        self.record = etcd.leader_record(address, self.run_id)
        self.margin = max(0.5, ttl / 4)  # served no later than this before the lease may end
        self._timeout = max(0.5, min(1.0, ttl / 4))
        self.client = etcd.connect(endpoints, self._timeout)
        self._lease: Any = None
        self._held_until = 0.0  # monotonic: the lease surely lives until then
        self.standbys: list[str] = []  # the other candidates' addresses, as last read

    # -- candidacy ------------------------------------------------------------------------------------
    def campaign(self, stop: threading.Event) -> int | None:
        """Blocks until this master leads (returns its epoch) or `stop` is set (None)."""
        while not stop.is_set():
            try:
                epoch = self._try_to_lead()
                if epoch is not None:
                    return epoch
            except Exception as exc:  # etcd unreachable, a lease gone: keep trying
                log.debug("campaign: %s", exc)
                self._lease = None
            stop.wait(POLL_SECONDS)
        return None

    def _try_to_lead(self) -> int | None:
        fresh = self._lease is None
        self._renew()
        c = self.client
        if fresh:  # the candidate key lives under the lease: written once per lease (etcd syncs each write)
            c.put(etcd.candidates_prefix(self.cluster) + self.address, self.record, lease=self._lease)
        won, _ = c.transaction(
            compare=[c.transactions.create(self.key) == 0],
            success=[c.transactions.put(self.key, self.record, lease=self._lease)],
            failure=[],
        )
        value, meta = c.get(self.key)
        record = etcd.read_record(value)
        if record is not None and record.get("id") == self.run_id:
            if not won:  # ours from a leadership we gave up while etcd was away: start afresh
                c.delete(self.key)
                return None
            return int(meta.create_revision)
        return None

    def _renew(self) -> None:
        """Takes a lease, or renews the one held; sets how long it surely lives."""
        sent = time.monotonic()
        if self._lease is None:
            self._lease = self.client.lease(self.ttl)
            granted = self._lease.ttl
        else:
            responses = self._lease.refresh()
            granted = responses[0].TTL if responses else 0
        if granted <= 0:
            self._lease = None
            raise TimeoutError("the lease ended")
        self._held_until = sent + granted

    # -- leadership -----------------------------------------------------------------------------------
    def serving_deadline(self) -> float:
        """Monotonic time after which this master must not serve as leader."""
        return self._held_until - self.margin

    def hold(self, stop: threading.Event) -> None:
        """Keeps the leadership until it cannot be kept (returns) or `stop` is set."""
        while not stop.is_set():
            try:
                self._renew()
            except TimeoutError:
                log.warning("the lease of cluster %s's leadership ended", self.cluster)
                return
            except Exception as exc:
                log.warning("cannot renew the leadership of cluster %s: %s", self.cluster, exc)
            try:
                value, _ = self.client.get(self.key)
                record = etcd.read_record(value)
                if record is None or record.get("id") != self.run_id:
                    log.warning("the leader key of cluster %s is no longer ours", self.cluster)
                    return
                self.standbys = sorted(
                    r["address"]
                    for v, _ in self.client.get_prefix(etcd.candidates_prefix(self.cluster))
                    if (r := etcd.read_record(v)) is not None and r.get("id") != self.run_id
                )
            except Exception as exc:
                log.debug("cannot read the leader key: %s", exc)
            if time.monotonic() >= self.serving_deadline():
                return
            stop.wait(min(self.ttl / 4, max(0.05, self.serving_deadline() - time.monotonic())))

    def resign(self) -> None:
        """Gives the leadership (and candidacy) up at once: a standby leads without waiting for the
        lease to end."""
        lease, self._lease = self._lease, None
        self._held_until = 0.0
        if lease is not None:
            try:
                lease.revoke()
            except Exception as exc:
                log.debug("cannot revoke the lease: %s", exc)

    def close(self) -> None:
        self.resign()
        try:
            self.client.close()
        except Exception as exc:
            log.debug("closing the etcd client: %s", exc)
