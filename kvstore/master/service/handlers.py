"""RPC methods of the master: one function per typed request (kvstore.rpc.messages), calling the state
and shaping typed replies.

Batch methods answer per item (ItemResult) so one bad key never hides the others.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from kvstore._meta import encode_put_reply
from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    MasterUnavailableError,
    NotSupportedError,
    PermissionDeniedError,
)
from kvstore.master.ledger import node_acks
from kvstore.master.service import reads
from kvstore.master.service.loop_watch import LoopWatch
from kvstore.master.service.mount_check import MountCheck
from kvstore.master.service.node_nonces import NodeNonces
from kvstore.master.service.node_work import WorkChannel, has_work
from kvstore.master.service.path_reports import PathReports
from kvstore.master.service.puts import StartedOutcomes
from kvstore.master.service.shard_check import check_put_items
from kvstore.master.service.state import MasterState, RoomComing
from kvstore.rpc import admin
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed


class Deferred:
    """A reply that is not ready yet: the server sends `make_reply()` once `ready()` was called, or once
    `timeout` seconds have passed (a reply that is itself a Deferred is waited for in turn). The request's
    connection waits meanwhile; the master does not."""

    def __init__(self, make_reply: Callable[[], Any], timeout: float) -> None:
        self.make_reply = make_reply
        self.timeout = timeout
        self._on_ready: Callable[[], object] | None = None
        self._ready = False

    def ready(self) -> None:
        if not self._ready:
            self._ready = True
            if self._on_ready is not None:
                self._on_ready()

    def on_ready(self, callback: Callable[[], object]) -> None:
        self._on_ready = callback
        if self._ready:
            callback()


_DONE = m.ItemResult(0, "", None)  # (_per_item's result of a call that returned None)


def _per_item(fn: Callable[[], Any]) -> m.ItemResult:
    try:
        return m.ItemResult(0, "", fn())
    except KVStoreError as exc:
        return m.ItemResult(exc.code, str(exc), None)


class Handlers:
    def __init__(
        self,
        state: MasterState,
        describe: Callable[[], dict[str, Any]] | None = None,
        epoch: int = 0,
        watch: LoopWatch | None = None,
        paths: PathReports | None = None,
        mounts: MountCheck | None = None,
    ) -> None:
        """`describe()`: the cluster status (the server's: it knows its address and rates). `epoch`: this
        master's term as its cluster's leader (0: no HA), told to every client in Hello. `watch`: the
        server's loop watch (stats carry it; the scrape-time requests are timed by it). `mounts`: checks
        each segment mount against its engine (None: mounts are taken as said)."""
        self.state = state  # (its stats: kvstore.master.service.state)
        # The owners of what the handlers ask, wait on or answer from, given by the state.
        self.config, self.clock, self.core = state.config, state.clock, state.core
        self.members, self.roles, self.suspicion = state.members, state.roles, state.suspicion
        self.puts, self.access, self.removal = state.puts, state.access, state.removal
        space, self.disk = state.space, state.disk  # (the fences, holds and polls are the memory space's)
        self.fences, self.holds, self.polls = space.fences, space.holds, space.polls
        self.work = WorkChannel(
            self.members.client,
            state.space,
            state.disk,
            state.replicator,
            state.corrupt_checks,
            self.removal.confirm_corrupt,
            self.core.plan_demotions,
        )
        self.mounts = mounts
        self.watch = watch or LoopWatch()
        self.paths = paths if paths is not None else PathReports(self.config.client_ttl)
        self.describe = describe
        self.epoch = epoch
        c = state.config  # (read at start: a bad admin secret file stops the master, not a request)
        self.admin_secret = admin.load_secret(
            c.admin_secret, c.admin_secret_file, "KVSTORE_MASTER_ADMIN_SECRET"
        )
        self._superseding: set[str] = set()  # node identities whose holder is being probed (_once_gone)
        self.node_nonces = NodeNonces(state.clock)  # what a node's registration signs (RegisterClient)
        # Each request's handler is the method its METHOD names (kvstore.rpc.schema): a request without one
        # stops the master here, at start (test_rpc_handlers)
        self.by_type: dict[type[m.Request], Callable[[Any], Any]] = {
            cls: getattr(self, cls.METHOD) for cls in m.REQUESTS.values()
        }

    def handle(self, method: str, params: dict[str, Any], peer: str = "") -> Any:
        """Parses and answers one request; raises the KVStoreError to send back. `peer`: the host the
        request came from (its connection's peer address; "" in-process), what registrations are counted
        by per host."""
        try:
            request = m.parse_request(method, params)
        except KeyError:
            if method == "ping":  # what clients before the typed protocol opened with
                raise InvalidArgumentError(
                    f"this master speaks RPC protocol {m.PROTOCOL_VERSION}; the client is older: upgrade it"
                ) from None
            raise NotSupportedError(f"unknown method {method!r}") from None
        if type(request) in m.OWN_NAME:  # (an unknown client is left to the handler: most say "register")
            self.members.check_token(request.client_id, request.token)  # type: ignore[attr-defined]
        if isinstance(request, m.RegisterClient):
            return self.register_client(request, peer)
        return self.by_type[type(request)](request)

    def hello(self, r: m.Hello) -> tuple[int, ...]:
        """The reply says which shard of its cluster this master serves (when sharded): a client whose
        routing sends it another shard's keys refuses it (kvstore.cluster.master_client)."""
        if r.version != m.PROTOCOL_VERSION:
            raise InvalidArgumentError(
                f"client speaks RPC protocol {r.version}, this master speaks {m.PROTOCOL_VERSION}: "
                "run the same kvstore release on both"
            )
        return m.hello_reply(self.epoch, *self.config.shard_of)

    def register_client(self, r: m.RegisterClient, peer: str = "") -> m.RegisterReply | Deferred:
        """Registers; a node identity another registration holds (with memory or a disk) is taken only
        once that process is found gone (_once_gone). A node's registration must name a fresh nonce of
        this master's that its identity has not registered with (its signature over it was checked when
        the request was parsed: kvstore.rpc.messages.RegisterClient)."""
        if r.node_id:
            self.node_nonces.spend(r.node_id, r.node_nonce)
        checks = self.mounts
        holder = self.members.node_holder(r.node_id, r.client_id) if checks is not None else None
        if checks is None or holder is None:
            return self._registered(r, peer)
        return self._once_gone(r, peer, checks, *holder)

    def _once_gone(
        self, r: m.RegisterClient, peer: str, checks: MountCheck, owner: str, engine: str
    ) -> Deferred:
        """r's registration, which drops `owner` (the registration holding r's node identity), once the
        master's probe of owner's engine found it not answering as owner's: its process is gone (a
        restarted node's old one is dead: its port is closed, or the new process answers there). A live
        holder keeps its identity whoever asks, even one holding the node's key (a leaked file; review
        item 8): PermissionDeniedError. One probe per identity at a time (a flood queues none)."""
        if r.node_id in self._superseding:
            raise MasterUnavailableError(f"a registration of node {r.node_id!r} is being checked: try again")
        self._superseding.add(r.node_id)
        found: list[str | None] = []

        def registered() -> m.RegisterReply:
            if not found:
                raise MasterUnavailableError(f"the check of engine {engine} took over {checks.timeout} s")
            if found[0] is None:
                raise PermissionDeniedError(
                    f"node identity {r.node_id!r} is held by a live process (its engine {engine} answered "
                    "as that registration's): a second process cannot take it over"
                )
            return self._registered(r, peer)

        reply = Deferred(registered, checks.timeout + 1.0)

        def probed(why: str | None) -> None:
            self._superseding.discard(r.node_id)
            found.append(why)
            reply.ready()

        checks.probe(engine, owner, probed)
        return reply

    def _registered(self, r: m.RegisterClient, peer: str) -> m.RegisterReply:
        self.members.register_client(r.client_id, r.host_id, r.node_id, r.token, peer)
        c = self.config
        return m.RegisterReply(
            c.heartbeat_interval,
            c.client_ttl,
            c.lease_ttl,
            self.fences.current,
            self.members.client(r.client_id).registration,
        )

    def heartbeat(self, r: m.Heartbeat) -> m.HeartbeatReply:
        """Keeps the client alive (its node's work comes on its work channel: await_work)."""
        known = self.members.heartbeat(r.client_id)
        if r.touched:  # reads the client served from leased locations
            self.access.touch(r.touched)
        if known and r.paths is not None:
            self.paths.report(r.client_id, r.paths)
        return m.HeartbeatReply(known)

    def change_replica(self, r: m.ChangeReplica) -> None:
        self.access.change_replica(r.key, r.replicas)

    def close_client(self, r: m.CloseClient) -> None:
        self.members.drop_client(r.client_id)

    def mount_segment(self, r: m.MountSegment) -> int | Deferred:
        """Mounts once the engine it names confirmed it (kvstore.master.service.mount_check), when checked."""
        return self._once_checked(
            r.client_id, r.engine, r.region_id, r.size, lambda: self.members.mount_segment(r)
        )

    def _once_checked(
        self, client_id: str, engine: str, region_id: int, size: int, mount: Callable[[], int]
    ) -> int | Deferred:
        """`mount()` once the engine confirmed the client owns it and exports the region with at least
        `size` bytes; at once when mounts are not checked."""
        checks = self.mounts
        if checks is None:
            return mount()
        self.members.client(client_id)  # (before a handshake is spent on it)
        refusal: list[str | None] = []

        def mounted() -> int:
            if not refusal:
                raise MasterUnavailableError(f"the check of engine {engine} took over {checks.timeout} s")
            if refusal[0] is not None:
                raise PermissionDeniedError(f"not mounted: {refusal[0]}")
            return mount()

        reply = Deferred(mounted, checks.timeout + 1.0)

        def checked(why: str | None) -> None:
            refusal.append(why)
            reply.ready()

        checks.check(client_id, engine, region_id, size, checked)
        return reply

    def restore_segment(self, r: m.RestoreSegment) -> list[int]:
        return self.members.restore_segment(r.client_id, r.segment_id, r.records, r.last, r.removed)

    def await_work(self, r: m.AwaitWork) -> m.NodeWork | Deferred:
        """Takes the node's reports; answers with its work (kvstore.master.service.node_work), at once when
        some is queued (or `wait` is 0), else once some is or `wait` has passed."""
        self.work.take_reports(r, self.epoch)
        work = self.work.take_work(r.client_id, self.epoch)
        if has_work(work) or r.wait == 0:
            return work
        reply = Deferred(functools.partial(self.work.take_work, r.client_id, self.epoch), r.wait)
        self.polls.park(r.client_id, reply.ready)
        return reply

    @staticmethod
    def _after(reply: Any, seconds: float, wait: Callable[[Callable[[], None]], bool]) -> Any:
        """`reply`, at once when `wait(ready)` says nothing is to be waited for (False), else once it
        calls `ready()` or `seconds` have passed."""
        deferred = Deferred(lambda: reply, seconds)
        return deferred if wait(deferred.ready) else reply

    def _once_fenced(self, keys: list[str], reply: Any) -> Any:
        """`reply`, once none of `keys` has a freed replica a reader could still reach (a removal is
        complete only then: kvstore.master.ledger.fences)."""
        c = self.config
        when_settled = functools.partial(self.fences.when_settled, keys)
        return self._after(reply, c.lease_ttl + 2 * c.heartbeat_interval, when_settled)

    def unmount_segment(self, r: m.UnmountSegment) -> None:
        self.members.unmount_segment(r.client_id, r.segment_id)

    def put_start(self, r: m.PutStart) -> Packed | Deferred:
        """Places each item. When room is on its way (an object being demoted, slots being fenced), the
        reply waits for it (all such waits of one request together at most put_room_wait), then goes on."""
        self.members.client(r.client_id)  # an unknown writer fails the request, not each item
        check_put_items(self.config.shard_of, r.items)  # (a sharded master stores its own keys only)
        return self._start_items(r, StartedOutcomes(), self.clock() + self.config.put_room_wait)

    def _start_items(self, r: m.PutStart, started: StartedOutcomes, deadline: float) -> Packed | Deferred:
        """Places r's items from len(started) on, appending each one's outcome; a Deferred continuing
        from the item that waits for room (until `deadline`; after it, nothing waits). The reply is
        encoded in C++ (csrc/meta/put_reply.h: as msgpack-python packs the ItemResults and Placements)."""
        wait = self.clock() < deadline
        try:
            self.puts.start_puts(r.client_id, r.items, r.replicas, r.pin, r.min_replicas, wait, started)
        except RoomComing as coming:
            left = max(0.0, deadline - self.clock())
            reply = Deferred(lambda: self._start_items(r, started, deadline), left)
            coming.when_ready(reply.ready)
            return reply
        return Packed(encode_put_reply(started, started.placed.columns(), self.core.ledger.objects.places))

    def put_end(self, r: m.PutEnd) -> Packed | Deferred:
        """Commits the puts; the reply waits until the nodes of their replicas acknowledged that they
        hold them (at most durable_wait), so a master that dies after it cannot lose them: the
        nodes name them to the next one. The reply is encoded in C++ (per key [0, "", nil] or [code,
        message, nil], as msgpack-python packs the ItemResults)."""
        errors, marks = self.puts.commit_puts(r.client_id, r.keys)
        results = Packed(encode_put_reply(errors))
        wait = self.config.durable_wait
        if not marks or wait <= 0:
            return results
        return self._after(results, wait, lambda ready: self.holds.when_held(marks, ready, wait))

    def put_revoke(self, r: m.PutRevoke) -> list[m.ItemResult]:
        return [_per_item(functools.partial(self.puts.put_revoke, r.client_id, k)) for k in r.keys]

    def get_replicas(self, r: m.GetReplicas) -> list[m.ObjectLocation | None] | Packed | Deferred:
        """Per key its location with a lease (kvstore.master.service.reads); the reply waits for objects only
        on disk that must be loaded into memory for this reader (at most disk_read_wait)."""
        found = reads.look_up(self.access, self.disk, r.keys, r.host_id, r.prefix)
        if not found.loading:
            return reads.locations(self.access, found)
        reply = Deferred(lambda: reads.locations(self.access, found), self.config.disk_read_wait)
        reads.load_all(self.disk, found.loading, reply.ready)
        return reply

    def mount_disk(self, r: m.MountDisk) -> int | Deferred:
        """A disk its engine serves (`engine`, `file_region`) is checked as a segment is."""

        def mount() -> int:
            self.members.client(r.client_id)
            disk = self.disk.disk_space.mount(
                r.client_id, r.host_id, r.size, r.path, r.engine, r.file_region, r.restoring
            )
            return disk.id

        if not r.engine:
            return mount()
        return self._once_checked(r.client_id, r.engine, r.file_region, r.size, mount)

    def restore_disk(self, r: m.RestoreDisk) -> int:
        return self.members.restore_disk(r.client_id, r.records, r.last, r.removed)

    def disk_degraded(self, r: m.DiskDegraded) -> None:
        self.members.client(r.client_id)
        self.disk.set_degraded(r.client_id, r.reason)

    def match_prefix(self, r: m.MatchPrefix) -> m.PrefixMatch:
        return reads.prefix_match(self.access, r.keys)

    def exists(self, r: m.Exists) -> list[bool]:
        return self.access.exists_many(r.keys)

    def report_replicas(self, r: m.ReportReplicas) -> None:
        """Only from a registered client (and in its own name: handle() checked its token)."""
        self.members.client(r.client_id)
        for engine in r.unreachable:
            owner = self.suspicion.report_unreachable(engine, r.client_id)
            # the master's own look at it (kvstore.master.service.suspicion)
            if owner and self.mounts is not None:
                self.mounts.probe(engine, owner, functools.partial(self.suspicion.probed, engine, owner))
        for c in r.corrupt:
            self.removal.report_corrupt(c.key, c.engine, c.region_id, c.offset, c.checksum)

    def _once_forgotten(self, first_kill: int, reply: Any) -> Any:
        """`reply`, once the nodes applied the kills queued from `first_kill` on (they forgot the removed
        objects: a master that dies now cannot get them back from them) and the disk drops queued with
        them (numbered in the same sequence) reached their nodes, or after durable_wait."""
        wait = self.config.durable_wait
        fences, disk = self.fences, self.disk
        marks, drops = fences.queued_since(first_kill), disk.drops_since(first_kill)
        if (not marks and not drops) or wait <= 0:
            return reply
        waits = [
            functools.partial(fences.when_applied, marks, seconds=wait),
            functools.partial(disk.when_dropped, drops, seconds=wait),
        ]
        return self._after(reply, wait, functools.partial(node_acks.wait_all, waits))

    def remove(self, r: m.Remove) -> list[m.ItemResult] | Deferred:
        first_kill = self.fences.next_id
        errors = self.removal.remove_many(r.keys, r.force, r.client_id)  # (one batch: each key as alone)
        results = [_DONE if e is None else m.ItemResult(e.code, str(e), None) for e in errors]
        removed = [k for k, res in zip(r.keys, results, strict=True) if not res.code]
        return self._once_fenced(removed, self._once_forgotten(first_kill, results))

    def remove_all(self, r: m.RemoveAll) -> int | Deferred:
        first_kill = self.fences.next_id
        removed = self.removal.remove_all(r.force, r.client_id)
        return self._once_fenced(removed, self._once_forgotten(first_kill, len(removed)))

    def node_challenge(self, r: m.NodeChallenge) -> str:
        return self.node_nonces.new()

    def admin_challenge(self, r: m.AdminChallenge) -> str:
        return self.roles.admin_challenge(r.client_id)

    def admin_prove(self, r: m.AdminProve) -> None:
        self.roles.admin_prove(r.client_id, r.proof, self.admin_secret)

    def stats(self, r: m.Stats) -> dict[str, Any]:
        with self.watch.timed("scrape_stats"):
            return {**self.state.stats(), **self.watch.stats()}

    def cluster_status(self, r: m.ClusterStatus) -> dict[str, Any]:
        if self.describe is None:
            raise NotSupportedError("this master does not describe its cluster")
        with self.watch.timed("scrape_status"):
            return self.describe()
