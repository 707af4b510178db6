"""The store's own KV events: which objects the store holds in which tier, published on a ZMQ PUB socket
in the shape the engines and Mooncake's master use (RFC #1527 events in vLLM's three-frame batch: topic,
8-byte big-endian sequence number, msgpack [timestamp, [event, ...], dp_rank]).

One event per object key as the ledger changes it: `stored` when a put commits, an object is restored or
a copy lands (medium cpu) or a disk record is set (disk); `removed` when the object goes (cpu and disk),
when its last memory copy goes (cpu) or its disk record does (disk). An object key that is a sequence hash
(decimal, or 0x and hex, below 2^64) is carried in `seq_hashes`, any key in `object_key`.

A block keyed by a connector's sequence hash (kvstore.blocks.seq_key `<namespace>/0x<16 hex>[.<digest>]`)
is carried with its hash in `seq_hashes` and its namespace in `namespace`. When its objects are a group
(`...#<i>of<n>`, the head slices of one block), the block is one event, named by member 0's key: `stored`
when the master shows the group (its last member committed: GroupsShown), `removed` when it hides it (a
member is dropped: GroupsHidden); a memory or disk copy of member 0 coming or going is that medium's
event, as for one object.

Register the endpoint with the routing index (`kvstore index`, type "kvstore") under the model and block
size whose blocks the keys name, with `namespace` to credit that namespace's blocks to every instance of
the model. Events go out from a thread of their own: the master's loop only queues them (a full queue
drops batches and counts them; a subscriber sees the gap in the sequence numbers).
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import msgpack

from kvstore.blocks import group_of, seq_of
from kvstore.errors import AddressInUseError, InvalidArgumentError, PermissionDeniedError
from kvstore.local_files import unsafe_directory
from kvstore.master.ledger.changes import (
    DiskRecordDropped,
    DiskRecordSet,
    GroupsHidden,
    GroupsShown,
    ObjectDropped,
    ObjectRestored,
    ObjectsAdopted,
    PutsCommitted,
    ReplicaAdded,
    ReplicaDropped,
    ReplicaRestored,
)
from kvstore.master.ledger.ledger import Ledger
from transfer_engine.security import is_loopback

log = logging.getLogger("kvstore.master")

MAX_QUEUED_BATCHES = 10_000
U64 = 1 << 64


def seq_hash(key: str) -> int | None:
    """The sequence hash an object key names (decimal, or 0x and hex, below 2^64), else None."""
    try:
        value = int(key, 16) if key[:2] in ("0x", "0X") else int(key, 10) if key.isdigit() else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value < U64 else None


class KeyEvent(NamedTuple):
    """What one event says of a key: the object key it names, its sequence hash and, for a block keyed
    by seq_key, its namespace."""

    object_key: str
    seq_hash: int | None
    namespace: str | None = None


def _block(key: str) -> tuple[str, int, tuple[str, int, int] | None] | None:
    """(namespace, sequence hash, group membership) of a seq-keyed block's object; None for other keys."""
    if "/0x" not in key:  # (the cheap test first: most keys are not blocks)
        return None
    named = seq_of(key)
    return None if named is None else (named[0], named[1], group_of(key))


def stored_events(keys: Iterable[str], shown: Callable[[str, int], bool]) -> list[KeyEvent]:
    """The events of `keys` becoming stored: a plain key or a lone block as itself; a block's group as its
    member 0, while readers see the group (`shown(group, count)`)."""
    out: list[KeyEvent] = []
    for key in keys:
        block = _block(key)
        if block is None:
            out.append(KeyEvent(key, seq_hash(key)))
            continue
        namespace, digest, member = block
        if member is None or (member[1] == 0 and shown(member[0], member[2])):
            out.append(KeyEvent(key, digest, namespace))
    return out


def removed_events(keys: Iterable[str]) -> list[KeyEvent]:
    """The events of `keys` stopping being stored: a plain key or a lone block as itself; a block's group
    as its member 0 (the master hides a group whole: GroupsHidden names every member)."""
    out: list[KeyEvent] = []
    for key in keys:
        block = _block(key)
        if block is None:
            out.append(KeyEvent(key, seq_hash(key)))
        elif block[2] is None or block[2][1] == 0:
            out.append(KeyEvent(key, block[1], block[0]))
    return out


def check_endpoint(endpoint: str, insecure: bool, tcp: bool = False) -> None:
    """Binds only where the master may: ipc:// (a socket only the master's user may connect to), or
    tcp:// when `tcp` allows it explicitly (any local user may subscribe to a loopback port), beyond
    loopback only when `insecure` too (the events name every object key, and a PUB socket asks nobody
    who subscribes)."""
    if endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"):
        return
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    if not endpoint.startswith("tcp://") or not port.isdigit() or not host:
        raise PermissionDeniedError(f"KV events endpoint {endpoint!r} must be tcp://HOST:PORT or ipc://PATH")
    if not tcp:
        raise PermissionDeniedError(
            f"KV events on {endpoint} would give every object key to any user of this host who connects: "
            "publish on ipc://PATH (readable by the master's user only), or allow tcp explicitly with "
            "--kv-events-tcp / KVSTORE_MASTER_KV_EVENTS_TCP=1"
        )
    if not is_loopback(host.strip("[]")) and not insecure:
        raise PermissionDeniedError(
            f"the master would publish every object key on {endpoint}, where anyone could subscribe: bind it "
            "on loopback or ipc://, or allow it with KVSTORE_INSECURE=1"
        )


def _bind_private(socket: Any, path: str) -> None:
    """Binds an ipc socket that only this user may connect to: made mode 0600 (under a umask that opens
    it to nobody meanwhile), its directory made 0700 when the master makes it. A directory another user
    could remove or replace the socket in (theirs, or open to all and not sticky: kvstore.local_files) is
    refused: subscribers would connect to whatever they put there."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    why = unsafe_directory(directory)
    if why:
        raise PermissionDeniedError(
            f"KV events socket {path}: its directory {directory} is {why}; another local user could replace "
            "the socket there. Choose a directory of the master's user"
        )
    before = os.umask(0o077)  # (process-wide for this instant: anything made meanwhile is only closer)
    try:
        socket.bind(f"ipc://{path}")
    finally:
        os.umask(before)
    os.chmod(path, 0o600)


def _bind_tcp(socket: Any, endpoint: str) -> None:
    """Binds a tcp:// endpoint; one taken, or refused, is one error naming the setting (not a ZMQ trace)."""
    import zmq

    try:
        socket.bind(endpoint)
    except zmq.ZMQError as exc:
        setting = "--kv-events-endpoint (KVSTORE_MASTER_KV_EVENTS_ENDPOINT)"
        host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
        if exc.errno == errno.EADDRINUSE and port.isdigit():
            raise AddressInUseError(host.strip("[]"), int(port), setting) from None
        raise InvalidArgumentError(f"cannot publish KV events on {endpoint}: {exc}; see {setting}") from None


class StoreEvents:
    def __init__(self, ledger: Ledger, endpoint: str, backend_id: str) -> None:
        import zmq  # (only a master asked to publish needs ZMQ)

        self._ledger = ledger
        self._backend = backend_id
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        if endpoint.startswith("ipc://"):
            _bind_private(self._socket, endpoint.removeprefix("ipc://"))
        else:
            _bind_tcp(self._socket, endpoint)
        self.endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._queue: queue.Queue[tuple[int, list[dict[str, Any]]] | None] = queue.Queue(MAX_QUEUED_BATCHES)
        self._seq = 0
        self._next_id = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._publish, name="kvstore-kv-events", daemon=True)
        self._thread.start()
        # A group of members is announced as the ledger shows and hides it; a copy of member 0 coming or
        # going on a medium is that medium's event while the group is shown.
        never = lambda group, count: False  # noqa: E731
        new = lambda keys: self._events("stored", "cpu", stored_events(keys, never))  # noqa: E731
        ledger.watch(PutsCommitted, lambda rs: new([k for r in rs for k in r.keys]))
        ledger.watch(ObjectRestored, lambda rs: new([m.key for r in rs for m in r.metas]))
        ledger.watch(ObjectsAdopted, lambda rs: new([rec[3] for r in rs for rec in r.records]))
        ledger.watch(GroupsShown, lambda rs: self._shown([k for r in rs for k in r.keys]))
        ledger.watch(ReplicaAdded, lambda rs: self._copied("cpu", [r.key for r in rs]))
        ledger.watch(ReplicaRestored, lambda rs: self._copied("cpu", [r.key for r in rs]))
        ledger.watch(DiskRecordSet, lambda rs: self._copied("disk", [r.key for r in rs]))
        ledger.watch(ReplicaDropped, self._replicas_dropped)
        ledger.watch(ObjectDropped, lambda rs: self._gone([r.key for r in rs]))
        ledger.watch(GroupsHidden, lambda rs: self._gone([k for r in rs for k in r.keys]))
        ledger.watch(DiskRecordDropped, lambda rs: self._removed("disk", [r.key for r in rs]))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._socket.close(linger=0)
        self._context.term()

    def _shown(self, keys: list[str]) -> None:
        self._events("stored", "cpu", stored_events(keys, lambda group, count: True))

    def _copied(self, medium: str, keys: list[str]) -> None:
        groups = self._ledger.groups
        self._events("stored", medium, stored_events(keys, lambda *group: groups.complete(group)))

    def _removed(self, medium: str, keys: list[str]) -> None:
        self._events("removed", medium, removed_events(keys))

    def _replicas_dropped(self, records: list[ReplicaDropped]) -> None:
        objects = self._ledger.objects
        self._removed(
            "cpu", [r.key for r in records if (meta := objects.get(r.key)) is None or not meta.replicas]
        )

    def _gone(self, keys: list[str]) -> None:
        self._removed("cpu", keys)
        self._removed("disk", keys)

    def _events(self, kind: str, medium: str, events: list[KeyEvent]) -> None:
        if not events:
            return
        now = int(time.time() * 1000)
        batch = []
        for e in events:
            event = {
                "event_id": self._next_id,
                "timestamp": now,
                "event_type": kind,
                "tenant_id": "default",
                "backend_id": self._backend,
                "medium": medium,
                "seq_hashes": [] if e.seq_hash is None else [e.seq_hash],
                "object_key": e.object_key,
            }
            if e.namespace is not None:
                event["namespace"] = e.namespace
            batch.append(event)
            self._next_id += 1
        seq, self._seq = self._seq, self._seq + 1  # (numbered when queued: a dropped batch leaves a gap)
        try:
            self._queue.put_nowait((seq, batch))
        except queue.Full:
            self.dropped += 1

    def _publish(self) -> None:
        while (item := self._queue.get()) is not None:
            seq, batch = item
            payload = msgpack.packb([time.time(), batch, 0])
            try:
                self._socket.send_multipart([b"", seq.to_bytes(8, "big"), payload])
            except Exception as exc:  # (a publisher must not stop the master)
                log.warning("could not publish KV events: %s", exc)
