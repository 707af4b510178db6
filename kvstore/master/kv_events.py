"""The store's own KV events: which objects the store holds in which tier, published on a ZMQ PUB socket
in the shape the engines and Mooncake's master use (RFC #1527 events in vLLM's three-frame batch: topic,
8-byte big-endian sequence number, msgpack [timestamp, [event, ...], dp_rank]).

One event per object key as the ledger changes it: `stored` when a put commits, an object is restored or
a copy lands (medium cpu) or a disk record is set (disk); `removed` when the object goes (cpu and disk),
when its last memory copy goes (cpu) or its disk record does (disk). An object key that is a sequence hash
(decimal, or 0x and hex, below 2^64) is carried in `seq_hashes`, any key in `object_key`; register the
endpoint with the routing index (`kvstore index`, type "kvstore") under the model and block size whose
blocks the keys name. Events go out from a thread of their own: the master's loop only queues them (a
full queue drops batches and counts them; a subscriber sees the gap in the sequence numbers).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from typing import Any

import msgpack

from kvstore.errors import PermissionDeniedError
from kvstore.local_files import unsafe_directory
from kvstore.master.changes import (
    DiskRecordDropped,
    DiskRecordSet,
    ObjectDropped,
    ObjectRestored,
    ObjectsAdopted,
    PutsCommitted,
    ReplicaAdded,
    ReplicaDropped,
    ReplicaRestored,
)
from kvstore.master.ledger import Ledger
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
            self._socket.bind(endpoint)
        self.endpoint = self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._queue: queue.Queue[tuple[int, list[dict[str, Any]]] | None] = queue.Queue(MAX_QUEUED_BATCHES)
        self._seq = 0
        self._next_id = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._publish, name="kvstore-kv-events", daemon=True)
        self._thread.start()
        stored_cpu = lambda keys: self._events("stored", "cpu", keys)  # noqa: E731
        ledger.watch(PutsCommitted, lambda rs: stored_cpu([k for r in rs for k in r.keys]))
        ledger.watch(ObjectRestored, lambda rs: stored_cpu([m.key for r in rs for m in r.metas]))
        ledger.watch(ObjectsAdopted, lambda rs: stored_cpu([rec[3] for r in rs for rec in r.records]))
        ledger.watch(ReplicaAdded, lambda rs: stored_cpu([r.key for r in rs]))
        ledger.watch(ReplicaRestored, lambda rs: stored_cpu([r.key for r in rs]))
        ledger.watch(ReplicaDropped, self._replicas_dropped)
        ledger.watch(ObjectDropped, self._objects_dropped)
        ledger.watch(DiskRecordSet, lambda rs: self._events("stored", "disk", [r.key for r in rs]))
        ledger.watch(DiskRecordDropped, lambda rs: self._events("removed", "disk", [r.key for r in rs]))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._socket.close(linger=0)
        self._context.term()

    def _replicas_dropped(self, records: list[ReplicaDropped]) -> None:
        objects = self._ledger.objects
        gone = [r.key for r in records if (meta := objects.get(r.key)) is None or not meta.replicas]
        self._events("removed", "cpu", gone)

    def _objects_dropped(self, records: list[ObjectDropped]) -> None:
        keys = [r.key for r in records]
        self._events("removed", "cpu", keys)
        self._events("removed", "disk", keys)

    def _events(self, kind: str, medium: str, keys: list[str]) -> None:
        if not keys:
            return
        now = int(time.time() * 1000)
        batch = []
        for key in keys:
            digest = seq_hash(key)
            batch.append(
                {
                    "event_id": self._next_id,
                    "timestamp": now,
                    "event_type": kind,
                    "tenant_id": "default",
                    "backend_id": self._backend,
                    "medium": medium,
                    "seq_hashes": [] if digest is None else [digest],
                    "object_key": key,
                }
            )
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
