"""A master's candidacy in etcd: campaign for the cluster's leader key, hold it, give it up.

The leader key lives under the candidate's lease (leader_ttl seconds) and holds its record, signed with
the cluster secret (kvstore.rpc.etcd_records). The leader renews the lease a few times per TTL and knows
until when it surely holds it: the time it *sent* its last successful renewal plus the TTL (etcd counts
from when it received it, later). It stops serving a margin before that instant, so a standby, which can
win only once etcd has let the lease expire, never leads while the old leader still serves: no two
leaders at any time, even when etcd or the network between them fails.

Someone who may write etcd can overwrite or delete the key. The leader, its lease alive, takes it back
(serving on); it also serves no longer than the TTL past the last time it read its own record there. A
standby leads past a record that does not verify only once that record stayed unchanged longer than any
leader could serve on it and the last leader it saw has lost its lease; past a deleted key only once that
lease has ended too. A record that verifies and is not the leader's own is a leader elected meanwhile:
the old one steps down.

A standby watches the leader key (kvstore.rpc.etcd.KeyWatch): it tries to lead as soon as etcd deletes
the key (the leader resigned, or its lease ended), polling as well in case the watch is lost. What it may
do then is the same either way: the watch only ends the wait sooner.

The epoch of a leadership is the etcd revision of the write that made it leader: it grows with each new
leader, and clients refuse to follow a leader older than one they have seen (kvstore.cluster.master_client).

Blocking (gRPC) calls: the server runs these methods on threads of their own.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from kvstore.config.etcd import EtcdConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError, MasterUnavailableError
from kvstore.rpc import etcd
from kvstore.rpc.etcd_records import CANDIDATE, LEADER, MasterRecord, Records

log = logging.getLogger("kvstore.master")

POLL_SECONDS = 0.2  # how often a standby looks at the leader key (a watch wakes it sooner)
FORGED_GRACE = 1.0  # seconds past the TTL a record that does not verify stands before a standby replaces it


class Election:
    def __init__(
        self,
        endpoints: str,
        cluster: str,
        address: str,
        ttl: int,
        settings: EtcdConfig | None = None,
        secret: bytes | None = None,
    ) -> None:
        """`settings`: etcd's TLS and login (from KVSTORE_ETCD_* if None); `secret`: the cluster secret
        the records are signed with (from the environment if None)."""
        self.cluster, self.address, self.ttl = etcd.check_cluster(cluster, shard_of_one=True), address, ttl
        self.key = etcd.leader_key(cluster)
        self.run_id = uuid.uuid4().hex  # this process's candidacy (a restarted one is another)
        self._secret = SecurityConfig.load().secret() if secret is None else secret
        self.records = Records(self._secret, cluster)
        self.margin = max(0.5, ttl / 4)  # served no later than this before the lease may end
        self._timeout = max(0.5, min(1.0, ttl / 4))
        self._endpoints, self._settings = endpoints, settings or EtcdConfig.load()
        self.client = etcd.connect(endpoints, self._timeout, self._settings)
        self._leader_key = etcd.KeyWatch(lambda: self.client, self.key)  # (the client may be replaced)
        self._lease: Any = None
        self.record = b""  # our leader record (it names the lease)
        self._held_until = 0.0  # monotonic: the lease surely lives until then
        self._key_until = 0.0  # monotonic: the key held our record when last read, plus the TTL
        self._last_leader: MasterRecord | None = None  # the last leader a standby saw
        self._forged: tuple[int, float] | None = None  # (revision, first seen) of a key that does not verify
        self.standbys: list[str] = []  # the other candidates' addresses, as last read

    def publish_shards(self, cluster: str, shards: int) -> None:
        """Writes the shard map of `cluster` (how many shards its key space is split over, signed with
        the cluster secret: clients and nodes read it to route) unless one is there; a map that says
        another count, or does not verify, is refused: clients routing by it would ask this shard for
        keys it does not hold. One shard writes no map (a cluster without one is one shard) but is
        refused as well where a map says more: it would serve keys the clients route to other shards."""
        records = Records(self._secret, cluster)
        c, key, value = self.client, etcd.shards_key(cluster), records.encode_shards(shards)
        try:
            if shards > 1:
                c.transaction(
                    compare=[c.transactions.create(key) == 0],
                    success=[c.transactions.put(key, value)],
                    failure=[],
                )
            found, _ = c.get(key)
        except Exception as exc:  # grpc errors of every kind: etcd cannot be asked
            raise MasterUnavailableError(
                f"cannot write the shard map of cluster {cluster!r}: {etcd.explain(exc)}"
            ) from exc
        there = records.decode_shards(found) if found is not None else 1
        if there != shards:
            said = (
                f"split over {there} shards"
                if there is not None
                else "given a shard map that does not verify"
            )
            raise InvalidArgumentError(
                f"cluster {cluster!r} is {said} in etcd, not {shards}: give every master the same --shards "
                "and cluster secret (or remove the map with etcdctl to change it)"
            )

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
                self._login_again_if(exc)
            if not stop.is_set():  # (close() wakes the wait)
                self._leader_key.wait(POLL_SECONDS)
        return None

    def _try_to_lead(self) -> int | None:
        fresh = self._lease is None
        self._renew()
        c = self.client
        if fresh:  # the candidate key lives under the lease: written once per lease (etcd syncs each write)
            mine = self.records.encode(CANDIDATE, self._own())
            c.put(etcd.candidates_prefix(self.cluster) + self.address, mine, lease=self._lease)
        value, meta = c.get(self.key)
        if value is None:
            if self._last_leader_lives():
                return None
            compare = c.transactions.create(self.key) == 0
        else:
            record = self.records.decode(LEADER, value, meta.lease_id)
            if record is not None:
                self._forged = None
                if record.run_id == self.run_id:  # ours from a leadership given up while etcd was away
                    same = c.transactions.mod(self.key) == meta.mod_revision
                    c.transaction(compare=[same], success=[c.transactions.delete(self.key)], failure=[])
                else:
                    self._last_leader = record
                return None
            if not self._forged_long_enough(int(meta.mod_revision)):
                return None
            compare = c.transactions.mod(self.key) == meta.mod_revision
        return self._write_leader_key(compare)

    def _write_leader_key(self, compare: Any) -> int | None:
        """Makes the leader key ours if `compare` holds; the epoch, or None when another write won."""
        c, sent = self.client, time.monotonic()
        won, _ = c.transaction(
            compare=[compare],
            success=[c.transactions.put(self.key, self.record, lease=self._lease)],
            failure=[],
        )
        if not won:
            return None
        value, meta = c.get(self.key)
        if value != self.record or meta.lease_id != self._lease.id:
            return None  # overwritten at once: campaign again
        if self._forged is not None:
            log.warning(
                "took over the leader key of cluster %s from a record that does not verify", self.cluster
            )
        self._forged, self._last_leader = None, None
        self._key_until = sent + self.ttl
        return int(meta.mod_revision)

    def _forged_long_enough(self, revision: int) -> bool:
        """The leader key holds a record that does not verify (written by someone without the secret, or
        not a record at all): True once it stood unchanged longer than any leader could serve without
        taking it back, and the last leader seen has lost its lease."""
        now = time.monotonic()
        if self._forged is None or self._forged[0] != revision:
            if self._forged is None:
                log.warning("the leader key of cluster %s holds a record that does not verify", self.cluster)
            self._forged = (revision, now)
            return False
        ttl = max(self.ttl, self._last_leader.ttl if self._last_leader is not None else 0)
        return now - self._forged[1] > ttl + FORGED_GRACE and not self._last_leader_lives()

    def _last_leader_lives(self) -> bool:
        """The lease of the last leader this standby saw still lives (it may still serve)."""
        if self._last_leader is None:
            return False
        if self.client.get_lease_info(self._last_leader.lease).TTL > 0:
            return True
        self._last_leader = None
        return False

    def _own(self) -> MasterRecord:
        return MasterRecord(self.address, self.run_id, int(self._lease.id), self.ttl)

    def _renew(self) -> None:
        """Takes a lease, or renews the one held; sets how long it surely lives."""
        sent = time.monotonic()
        if self._lease is None:
            self._lease = self.client.lease(self.ttl)
            granted = self._lease.ttl
            self.record = self.records.encode(LEADER, self._own())
        else:
            responses = self._lease.refresh()
            granted = responses[0].TTL if responses else 0
        if granted <= 0:
            self._lease = None
            raise TimeoutError("the lease ended")
        self._held_until = sent + granted

    def _login_again_if(self, exc: BaseException) -> None:
        """etcd forgot our login (it restarted): log in again, keeping the lease."""
        if not etcd.needs_login(exc):
            return
        try:
            client = etcd.connect(self._endpoints, self._timeout, self._settings)
        except Exception as again:
            log.warning("cannot log in to etcd again: %s", again)
            return
        old, self.client = self.client, client
        if self._lease is not None:
            self._lease.etcd_client = client
        log.warning("etcd forgot this master's login (it restarted?): logged in again")
        try:
            old.close()
        except Exception as closing:
            log.debug("closing the etcd client: %s", closing)

    # -- leadership -----------------------------------------------------------------------------------
    def serving_deadline(self) -> float:
        """Monotonic time after which this master must not serve as leader."""
        return min(self._held_until, self._key_until) - self.margin

    def hold(self, stop: threading.Event) -> None:
        """Keeps the leadership until it cannot be kept (returns) or `stop` is set."""
        while not stop.is_set():
            try:
                self._renew()
            except TimeoutError:
                log.warning("the lease of cluster %s's leadership ended", self.cluster)
                return
            except Exception as exc:
                log.warning("cannot renew the leadership of cluster %s: %s", self.cluster, etcd.explain(exc))
                self._login_again_if(exc)
            try:
                if not self._keep_key():
                    return
                self.standbys = self._standbys()
            except Exception as exc:
                log.debug("cannot read the leader key: %s", exc)
                self._login_again_if(exc)
            if time.monotonic() >= self.serving_deadline():
                return
            stop.wait(min(self.ttl / 4, max(0.05, self.serving_deadline() - time.monotonic())))

    def _keep_key(self) -> bool:
        """Reads the leader key; takes it back if it was overwritten or deleted. False when another leader
        holds it (one elected meanwhile: this one must step down)."""
        c, sent = self.client, time.monotonic()
        value, meta = c.get(self.key)
        if value == self.record and meta.lease_id == self._lease.id:
            self._key_until = sent + self.ttl
            return True
        record = self.records.decode(LEADER, value, meta.lease_id) if value is not None else None
        if record is not None and record.run_id != self.run_id:
            log.warning("cluster %s has another leader (%s): stepping down", self.cluster, record.address)
            return False
        compare = (
            c.transactions.create(self.key) == 0
            if value is None
            else c.transactions.mod(self.key) == meta.mod_revision
        )
        put = c.transactions.put(self.key, self.record, lease=self._lease)
        won, _ = c.transaction(compare=[compare], success=[put], failure=[])
        if won:
            self._key_until = sent + self.ttl
            log.warning(
                "the leader key of cluster %s was %s: taken back",
                self.cluster,
                "deleted" if value is None else "overwritten",
            )
        return True

    def _standbys(self) -> list[str]:
        found = []
        for value, meta in self.client.get_prefix(etcd.candidates_prefix(self.cluster)):
            record = self.records.decode(CANDIDATE, value, meta.lease_id)
            if record is not None and record.run_id != self.run_id:
                found.append(record.address)
        return sorted(found)

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
        self._leader_key.close()
        self.resign()
        try:
            self.client.close()
        except Exception as exc:
            log.debug("closing the etcd client: %s", exc)
