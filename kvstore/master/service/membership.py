"""Clients and their segments: registration (bounded per host and in all), heartbeats, mounting (and what
a remounted segment or disk names back), and dropping a client with everything it held."""

from __future__ import annotations

import hmac
import itertools
import secrets
from collections.abc import Iterable, Sequence

from kvstore.errors import NotFoundError, PermissionDeniedError, TooManyConnectionsError
from kvstore.master.ledger.holds import NamedBack
from kvstore.master.ledger.model import Client, Segment
from kvstore.master.service.roles import Roles
from kvstore.master.service.state_core import StateCore
from kvstore.master.service.suspicion import Suspicion
from kvstore.rpc.messages import MountSegment

DROP_CHUNK = 16384  # objects of a lost segment dropped per table crossing
FAIR_SHARE_WALK = 64  # clients of the fullest address looked at for one holding nothing (at max_clients)


class Membership:
    """The registered clients (by node identity and by the address they register from), their segments
    and their roles; dropping one lets go of everything it held."""

    def __init__(self, core: StateCore, clients: dict[str, Client], suspicion: Suspicion) -> None:
        """`core`: the tables and primitives it works on; `clients`: the table it keeps (others read it);
        `suspicion`: told of heartbeats and of dropped clients."""
        self.config, self.clock, self.counters = core.config, core.clock, core.counters
        self.space, self.disk, self.ledger, self.policy = core.space, core.disk, core.ledger, core.policy
        self._pending = core.pending
        self.replicator, self.restorer = core.replicator, core.restorer
        self._delete, self._delete_bare = core.delete, core.delete_bare
        self.suspicion = suspicion
        self.clients = clients
        self.roles = Roles(clients, self.client)  # a role lasts as long as the registration
        self._by_node: dict[str, str] = {}  # node identity -> the client registered with it
        # Where clients register from -> its clients, in heartbeat order (max_clients_per_host): the
        # connection's peer address (a claimed host id would let a member fill another host's share).
        self._hosts: dict[str, dict[str, None]] = {}
        self._address_of: dict[str, str] = {}  # client -> its key in _hosts

    def client(self, client_id: str) -> Client:
        """The registered client, or NotFoundError (it must register again after a restart)."""
        client = self.clients.get(client_id)
        if client is None:
            raise NotFoundError(f"unknown client {client_id}; register first")
        return client

    def register_client(
        self, client_id: str, host_id: str, node_id: str = "", token: str = "", address: str = ""
    ) -> None:
        """Registers a client (again). A storage node that registers with the identity of an older
        registration is that node restarted: the old one is dropped at once (its process is gone), so
        what the node offers back (disk records) is taken, not deleted when the old TTL runs out. Only
        the node itself can name its identity: the request proves the node's key (kvstore.rpc.messages
        RegisterClient.node_id), so no member can drop a live node by naming it; nor with the key itself
        (a leaked file): the handlers register an identity a live process holds only once the master's
        probe found that process gone (node_holder).
        `token`: the process's own secret, chosen by it; a registration (again) of a known client with
        another one is refused, so no process can take over another's name. `address`: the host the
        request came from (the connection's peer; "" in-process: the claimed host id stands for it),
        what max_clients_per_host counts. A new client beyond max_clients (max_clients_per_host) takes
        the place of an idle one, or is refused."""
        client = self.clients.get(client_id)
        if client is not None:
            self.check_token(client_id, token)
            self._seen(client)
            return
        old = self._by_node.get(node_id) if node_id else None
        if old is not None and old != client_id:
            self.counters.superseded_clients += 1
            self.drop_client(old)
        address = address or host_id
        self._make_room(address)
        registration = secrets.randbits(63) | 1  # (never 0: what a report that names none carries)
        self.clients[client_id] = Client(
            client_id, host_id, self.clock(), node_id=node_id, token=token, registration=registration
        )
        self._hosts.setdefault(address, {})[client_id] = None
        self._address_of[client_id] = address
        if node_id:
            self._by_node[node_id] = client_id

    def node_holder(self, node_id: str, client_id: str) -> tuple[str, str] | None:
        """(the client, an engine of its) when another registration holds the node identity `node_id`
        and holds memory or a disk served by an engine: registering the identity again would drop it,
        which only that process being gone allows (the handlers probe its engine first). None when such
        a registration would drop nothing that holds anything."""
        old = self._by_node.get(node_id) if node_id else None
        if old is None or old == client_id or old not in self.clients:
            return None
        for seg_id in self.clients[old].segments:
            seg = self.space.segments.get(seg_id)
            if seg is not None:
                return old, seg.engine
        disk = next((s for s in self.disk.segments.values() if s.client_id == old and s.engine), None)
        return (old, disk.engine) if disk is not None else None

    def _make_room(self, address: str) -> None:
        """Below the caps, nothing; else drops the longest-silent idle client (of this address when it
        is at its cap): one that missed a heartbeat and holds no segment, disk or put in progress, so no
        healthy client is ever dropped for a new one. At max_clients with none idle, the address holding
        the most registrations gives up one that holds nothing, heard from lately or not, when it holds
        more than the newcomer's would: a member heartbeating made-up clients from a few addresses fills
        its own share, not everyone's. TooManyConnectionsError when no client can go."""
        c = self.config
        on_host = self._hosts.get(address, {})
        if len(on_host) >= c.max_clients_per_host:
            victim, limit = self._idlest(on_host), f"{c.max_clients_per_host} clients of host {address}"
        elif len(self.clients) >= c.max_clients:
            victim, limit = self._idlest(self.clients), f"{c.max_clients} clients"
            if victim is None:
                victim = self._of_the_fullest(len(on_host) + 1)
        else:
            return
        if victim is None:
            raise TooManyConnectionsError(
                f"the master holds its most: {limit} (max_clients, max_clients_per_host), all in use"
            )
        self.counters.dropped_clients += 1
        self.drop_client(victim)

    def _of_the_fullest(self, newcomers: int) -> str | None:
        """The longest-silent client holding nothing of the address with the most registrations, when
        that one holds more than `newcomers` (the newcomer's address with it); None if none. O(addresses)
        plus a walk of at most FAIR_SHARE_WALK of its clients."""
        fullest = max(self._hosts.values(), key=len, default={})
        if len(fullest) <= newcomers:
            return None
        for client_id in itertools.islice(fullest, FAIR_SHARE_WALK):
            client = self.clients[client_id]
            if not (client.segments or self._pending.held(client_id)[0] or self._has_disk(client_id)):
                return client_id
        return None

    def _seen(self, client: Client) -> float:
        """The client was heard from now: it moves last in the tables, which stay in heartbeat order
        (the longest silent first, for _idlest)."""
        on_host = self._hosts[self._address_of[client.id]]
        on_host[client.id] = on_host.pop(client.id)
        self.clients[client.id] = self.clients.pop(client.id)
        client.last_seen = now = self.clock()
        return now

    def _idlest(self, ids: Iterable[str]) -> str | None:
        """The first idle client of `ids` (in heartbeat order: the longest silent first); the walk ends
        at the first one heard from lately, as all after it were too."""
        silent_since = self.clock() - self.config.heartbeat_interval
        for client_id in ids:
            client = self.clients[client_id]
            if client.last_seen >= silent_since:
                return None
            if client.segments or self._pending.held(client_id)[0] or self._has_disk(client_id):
                continue
            return client_id
        return None

    def _has_disk(self, client_id: str) -> bool:
        return any(seg.client_id == client_id for seg in self.disk.segments.values())

    def heartbeat(self, client_id: str) -> bool:
        """False when the client is unknown (dropped): it must register and mount again. A heartbeat sent
        well after a client reported this client's segments unreachable proves them alive again."""
        client = self.clients.get(client_id)
        if client is None:
            return False
        now = self._seen(client)
        interval = self.config.heartbeat_interval
        for seg_id in client.segments:
            seg = self.space.segments.get(seg_id)
            if seg is None:
                continue
            self.suspicion.heard_from(seg.engine, now)  # what was found well before it is disproved by it
            if not seg.usable and now - seg.suspect_since >= interval:
                self.space.trust(seg)
        return True

    def check_token(self, client_id: str, token: str) -> None:
        """PermissionDeniedError when the client is registered with another token (a request in its name
        from another process); an unknown client passes (what it asked decides: most need registration)."""
        client = self.clients.get(client_id)
        if client is not None and not hmac.compare_digest(client.token.encode(), token.encode()):
            raise PermissionDeniedError(f"client {client_id!r} is registered by another process")

    def mount_segment(self, r: MountSegment) -> int:
        """Mounts the segment `r` declares (kvstore.rpc.node_requests.MountSegment) for its registered
        client; returns its id."""
        client = self.client(r.client_id)
        seg = self.space.mount(
            r.client_id, r.engine, r.region_id, r.size, r.host_id, r.fence_slots, r.restoring
        )
        client.segments.add(seg.id)
        return seg.id

    def restore_segment(
        self,
        client_id: str,
        segment_id: int,
        records: Sequence[NamedBack],
        last: bool,
        removed: Sequence[tuple[str, int]] | None = None,
    ) -> list[int]:
        """kvstore.master.service.restore.Restore.restore_segment: the replicas a node names back; returns the
        refused slots."""
        seg = self.space.segments.get(segment_id)
        if seg is None or seg.client_id != client_id:
            raise NotFoundError(f"client {client_id} has no segment {segment_id}")
        return self.restorer.restore_segment(seg, records, last, removed or [])

    def unmount_segment(self, client_id: str, segment_id: int) -> None:
        seg = self.space.segments.get(segment_id)
        if seg is None or seg.client_id != client_id:
            raise NotFoundError(f"client {client_id} has no segment {segment_id}")
        self._drop_segment(seg)

    def restore_disk(
        self,
        client_id: str,
        records: Sequence[tuple[int, str, int, int, int]],
        last: bool = True,
        removed: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        """kvstore.master.service.restore.Restore.restore_disk: the records a restarted node's disk offers
        back, after the removals it remembers; returns how many were taken."""
        self.client(client_id)
        seg = next((s for s in self.disk.segments.values() if s.client_id == client_id), None)
        if seg is None:
            raise NotFoundError(f"client {client_id} has no disk mounted")
        taken = self.restorer.restore_disk(seg, records, removed or [])
        if last:
            self.disk.disk_space.end_restore(seg)
        return taken

    def drop_client(self, client_id: str) -> None:
        client = self.clients.pop(client_id, None)
        if client is None:
            return
        if client.node_id and self._by_node.get(client.node_id) == client_id:
            del self._by_node[client.node_id]
        address = self._address_of.pop(client_id, client.host_id)
        on_host = self._hosts.get(address, {})
        on_host.pop(client_id, None)
        if not on_host:
            self._hosts.pop(address, None)
        self.roles.forget(client_id)
        for seg_id in list(client.segments):
            seg = self.space.segments.get(seg_id)
            if seg is not None:
                self._drop_segment(seg)
        for meta in self._pending.by(client_id):
            self._delete(meta)
        self.disk.drop_client(client_id)
        self.space.holds.drop_client(client_id)
        self.space.polls.forget(client_id)

    def _drop_segment(self, seg: Segment) -> None:
        """Every replica on the segment disappears; objects left without a replica disappear too."""
        self.replicator.drop_segment(seg)
        self.restorer.forget(seg.id)
        keys = self.space.unmount(seg)
        for at in range(0, len(keys), DROP_CHUNK):
            bare, disk_only = self.ledger.drop_copies_on(seg, keys[at : at + DROP_CHUNK])
            self._delete_bare(bare)
            self.policy.on_remove_many(disk_only)  # on disk only now
        client = self.clients.get(seg.client_id)
        if client:
            client.segments.discard(seg.id)
