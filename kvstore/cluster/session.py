"""A process's membership in the cluster: a connection to the master, a transfer engine, a client id the
master knows, and the heartbeat that keeps it known.

The client API (Store) and the storage node role (kvstore.node) both sit on one Session: each adds what
it reports with a heartbeat and what it does with the reply, so a process that is both still has one
identity and one heartbeat.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kvstore.cluster.leader import Locator, locator
from kvstore.cluster.master_client import MasterClient
from kvstore.config import StoreConfig
from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError, KVStoreError, MasterUnavailableError, PermissionDeniedError
from kvstore.rpc import admin, node_proof, tls
from kvstore.rpc import messages as m
from transfer_engine import Peer, TransferEngine

log = logging.getLogger("kvstore.cluster")

LEADER_POLL_SECONDS = 0.2  # how often a process starting between two leaders asks for the new one
# The first pause after a failed heartbeat (doubled up to the interval while it fails, and after news of a
# leader): a node whose master died joins the next leader as soon as it listens, and names its holds back.
FIRST_RETRY_SECONDS = 0.01


class Session:
    def __init__(
        self,
        config: StoreConfig,
        node_name: str = "",
        before_join: Callable[[TransferEngine], None] | None = None,
        node_key: str = "",
        security: SecurityConfig | None = None,
        where: Locator | None = None,
    ) -> None:
        """`node_name`: a storage node's identity on its host (kvstore.node.identity), with `node_key`,
        its secret kept across its restarts (kvstore.node.node_key): the master lets a registration with
        the same identity, proved by the same key, supersede this one at once. Plain clients have none.
        `before_join(engine)` runs before the master hears of this process (a node readies its memory:
        once registered, it must heartbeat). `security`: the cluster secret this process proves to the
        master and to peer engines, and TLS to the master (from the environment if None): its master
        connection and its transfer engine both use it. `where`: how the master is found (from config if
        None); the Session's master connection owns it."""
        if not config.master and not config.etcd:
            raise InvalidArgumentError(
                "no master address: pass --master HOST:PORT (master= in code), or set KVSTORE_MASTER (or "
                "KVSTORE_ETCD and KVSTORE_CLUSTER for a cluster whose masters elect a leader in etcd)"
            )
        self.config = config
        self._admin_secret = admin.load_secret(
            config.admin_secret, config.admin_secret_file, "KVSTORE_ADMIN_SECRET"
        )
        self._admin_for: object = None  # the registration (its terms) the admin secret was proved for
        self._reporters: list[Callable[[], dict[str, Any]]] = []
        self._rejoin_handlers: list[Callable[[], None]] = []
        self._peers: dict[str, Peer] = {}
        self._peers_lock = threading.Lock()
        self._closed = threading.Event()
        self._rejoin_lock = threading.Lock()
        # False while a join again is unfinished: registered, but a handler (a node's remount) failed
        self._joined = True
        self._heartbeat: threading.Thread | None = None
        if where is None:
            where = locator(config.master, config.etcd, config.cluster, min(config.rpc_timeout, 2.0))
        self.security = security if security is not None else SecurityConfig.load()
        self.master = MasterClient(
            where,
            config.rpc_timeout,
            config.rpc_busy_poll_us,
            secret=self.security.secret(),
            tls_context=tls.client_context(self.security),
            shard=config.shard,  # (its master must serve the shard its keys are routed to)
        )
        engine = None
        try:
            self._first_hello()
            engine = TransferEngine(config.engine, security=self.security)
            if before_join is not None:
                before_join(engine)
            self.token = m.new_token()  # requests in this process's name carry it
            self.client_id = m.client_id_for(self.token)
            self.master.identify(self.client_id, self.token)
            engine.set_owner(self.client_id)  # (the master mounts this engine's regions for us only)
            self.host_id = engine.host_id
            if node_name and not node_key:
                raise InvalidArgumentError("a node's identity needs its key (kvstore.node.node_key)")
            self.node_key = node_key
            self.node_id = ""  # (a node signs with its key pair: kvstore.rpc.node_proof)
            if node_name:
                self.node_id = f"{self.host_id}/{node_name}#{m.node_key_fingerprint(node_key)}"
            self.engine = engine
            self.terms = self._register()
            self.on_heartbeat(self._nic_paths)
        except BaseException:
            self.master.close()
            if engine is not None:
                engine.close()
            raise

    def _first_hello(self) -> None:
        """Reaches the master. A cluster that elects its leader in etcd may be between leaders (one just
        died, its lease has not ended): a process started then waits for the next one, up to its RPC
        timeout, rather than fail; a single master that does not answer is an error at once."""
        deadline = time.monotonic() + self.config.rpc_timeout
        while True:
            try:
                self.master.hello()
                return
            except MasterUnavailableError:
                if not self.config.etcd or time.monotonic() >= deadline:
                    raise
                time.sleep(LEADER_POLL_SECONDS)

    def _register(self) -> m.RegisterReply:
        """Registers; a node signs a fresh master nonce with its key (kvstore.rpc.node_proof), which
        never crosses the wire itself."""
        public = nonce = proof = ""
        if self.node_id:
            nonce = self.master.call(m.NodeChallenge())
            public = node_proof.public_of(self.node_key)
            proof = node_proof.sign(self.node_key, node_proof.message(nonce, self.client_id, self.node_id))
        return self.master.call(
            m.RegisterClient(
                client_id=self.client_id,
                host_id=self.host_id,
                node_id=self.node_id,
                token=self.token,
                node_public=public,
                node_nonce=nonce,
                node_proof=proof,
            )
        )

    def as_admin(self, required: bool) -> None:
        """Proves this process's admin secret (StoreConfig.admin_secret_file) to the master, once per
        registration: the master remembers the role until the registration ends (kvstore.rpc.admin).
        Without a secret nothing is proved; a refusal raises PermissionDeniedError when `required`, else
        the calls go as a member's (and it is not asked again for this registration)."""
        terms = self.terms
        if not self._admin_secret or self._admin_for is terms:
            return
        try:
            nonce = self.master.call(m.AdminChallenge(client_id=self.client_id))
            proof = admin.proof(self._admin_secret, self.client_id, nonce)
            self.master.call(m.AdminProve(client_id=self.client_id, proof=proof))
        except PermissionDeniedError:
            if required:
                raise
        self._admin_for = terms

    # -- what rides on the heartbeat ----------------------------------------------------------------
    def on_heartbeat(self, report: Callable[[], dict[str, Any]]) -> None:
        """`report()` adds fields to every heartbeat (e.g. reads served from leased locations)."""
        self._reporters.append(report)

    def _nic_paths(self) -> dict[str, Any]:
        """The engine's paths to the peers this session opened, summed per local NIC (for the master's
        /metrics): bytes, slices, failures, failovers, and how many are up or down."""
        totals: dict[str, list[int]] = {}
        for peer in self.opened_peers():
            try:
                paths = self.engine.paths(peer)
            except KVStoreError:
                continue  # closed or replaced meanwhile
            for p in paths:
                row = totals.setdefault(p.local_nic or "default", [0] * 6)
                for i, value in enumerate((p.bytes, p.slices, p.failures, p.failovers, p.up, not p.up)):
                    row[i] += int(value)
        rows = [[nic, *row] for nic, row in sorted(totals.items())][: m.MAX_NICS]
        return {"paths": rows} if rows else {}

    def on_rejoin(self, handler: Callable[[], None]) -> None:
        """`handler()` runs after the master forgot this process and it registered again."""
        self._rejoin_handlers.append(handler)

    def start(self) -> None:
        """Starts the heartbeat, once the roles on this session have hooked in."""
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="kvstore-heartbeat", daemon=True)
        self._heartbeat.start()

    def _heartbeat_loop(self) -> None:
        retry = 0.0  # after a failed heartbeat: the pause before the next (0: the interval, all is well)
        while True:
            interval = self.terms.heartbeat_interval
            news = False
            if not retry:
                if self._closed.wait(interval):
                    return
            else:  # the master is lost: try again once the next leader is named, or soon
                news = self.master.locator.wait_for_news(retry, self._closed)
                if self._closed.is_set():
                    return
            if self._beat(interval):
                retry = 0.0
            else:  # (a leader just named may not listen yet: its first tries come quickly)
                retry = FIRST_RETRY_SECONDS if news or not retry else min(interval, retry * 2)

    def _beat(self, interval: float) -> bool:
        """One heartbeat, and a join again when the master forgot us; False when it failed."""
        try:
            fields: dict[str, Any] = {}
            for report in self._reporters:
                fields.update(report())
            reply = self.master.call(m.Heartbeat(client_id=self.client_id, **fields), timeout=interval * 2)
            if not reply.known or not self._joined:  # dropped (e.g. the master restarted): join again
                self.rejoin()
            return True
        except KVStoreError as exc:
            log.debug("heartbeat failed: %s", exc)
            return False

    def rejoin(self) -> None:
        """Registers again after the master forgot this process (it restarted, or judged us dead). Safe
        to call from several threads: whoever comes second finds the master knows us again. A join that
        failed half way (registered, a segment not mounted again) is undone at the master and made again
        from the start by the next call or heartbeat: the master would otherwise know a node that serves
        nothing, and never say so."""
        with self._rejoin_lock:
            if self._joined and self.master.call(m.Heartbeat(client_id=self.client_id)).known:
                return
            if not self._joined:  # the undo below failed too: undo now
                self._leave()
            log.warning("master forgot this client; registering again")
            self._joined = False
            self.terms = self._register()
            try:
                for rejoin in self._rejoin_handlers:
                    rejoin()
            except BaseException:
                self._leave()  # the next call finds this process unknown and joins again
                raise
            self._joined = True

    def _leave(self) -> None:
        """Undoes a registration at the master, with all it holds (a segment mounted, even one whose
        reply was lost); best effort."""
        with contextlib.suppress(KVStoreError):
            self.master.call(m.CloseClient(client_id=self.client_id))

    # -- peers ----------------------------------------------------------------------------------------
    def opened_peers(self) -> list[Peer]:
        """The peer engines this session opened so far."""
        with self._peers_lock:
            return list(self._peers.values())

    def peer(self, name: str) -> Peer | None:
        """The opened peer engine `name` (opened on first use); None when it cannot be reached."""
        with self._peers_lock:
            peer = self._peers.get(name)
        if peer is not None:
            return peer
        try:
            peer = self.engine.open_peer(name)
        except KVStoreError as exc:
            log.debug("cannot open peer %s: %s", name, exc)
            return None
        with self._peers_lock:
            self._peers[name] = peer
        return peer

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self.master.locator.wake()  # (a heartbeat waiting for news of a lost master's successor)
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=self.terms.heartbeat_interval * 3)
        with contextlib.suppress(KVStoreError):  # else the master drops us after the heartbeat TTL
            self.master.call(m.CloseClient(client_id=self.client_id), timeout=2.0)
        self.master.close()
        self.engine.close()
