"""What a storage node's segment holds, as the master told it (kvstore.master.holds): per fence slot the
allocation and the object in it. A master that lost its table (it restarted, or a new one leads) is
given these back (RestoreSegment) and rebuilds the objects from them; a node that restarts on its
shared-memory segment (kvstore.node.segment_memory) reads them back from the catalog's file beside it.

The file is a log of msgpack records, appended as holds and kills arrive (shared memory: it outlives
the process, not the host), replayed on open and compacted when mostly dead, or when it outgrows the
bytes it was given (max_log_bytes: half the room its node reserved beside the segment, so churn alone
never fills a small tmpfs; the compaction's new file and the old fit in that room together). A torn
last record ends the replay; whatever the catalog names is checked against the object's checksum before
it is offered, so a record whose bytes were overwritten or never finished is a miss, never data.

It also keeps what the master removed while the node held it (a kill that names a tombstone generation:
kvstore.master.tombstones), for TOMB_SECONDS: the node names those first when it mounts again, so a
master that did not make the removal (it restarted since) refuses, or drops again, what another node
that never heard of the removal names.

The file opens with a header (its format and a random nonce) and each record is followed by a tag: an
HMAC chained from the header through every record, keyed by a key derived from the cluster secret. A
catalog not written by a process that knows the secret (planted beside a segment, spliced together from
other catalogs, or of an older format) names nothing past the first record that fails: its objects are
never offered as the node's. With no secret (a loopback-only cluster) the key is public: the tags then
catch damage only, and what keeps others from the file is its private directory (kvstore.local_files).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import logging
import operator
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

import msgpack
import numpy as np
import xxhash

from kvstore.rpc.messages import HeldReplica, Removal, RestoreRecord

log = logging.getLogger("kvstore.node")

_HOLD, _DROP, _BURY = 0, 1, 2
TOMB_SECONDS = 600.0  # how long a removal is remembered: nodes that never heard of it join a master by then
MAX_TOMBS = 1 << 18  # removals remembered at most (the oldest forgotten first)
_EMPTY_GEN = 2**64  # what drop() finds in an empty slot: newer than any kill
COMPACT_MIN = 65536  # log records before compaction is considered
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
_MAGIC, _VERSION = "kvstore segment catalog", 2
_TAG = 16  # bytes of a record's tag (a truncated HMAC-SHA256)
_TAG_HEADER = b"\xc4" + bytes((_TAG,))  # msgpack bin 8 of _TAG bytes


def catalog_key(secret: bytes) -> bytes:
    """The key of the catalog's tags, derived from the cluster secret (never the secret itself)."""
    return hmac.new(secret, b"kvstore segment catalog key v2", hashlib.sha256).digest()


def _tag(key: bytes, previous: bytes, data: bytes) -> bytes:
    return hmac.new(key, previous + data, hashlib.sha256).digest()[:_TAG]


# Places of a record's fields, for records kept as plain tuples (packed): by the declaration
_SLOT_AT, _GEN_AT, _KEY_AT = (RestoreRecord._fields.index(name) for name in ("slot", "gen", "key"))
_SLOT = operator.itemgetter(_SLOT_AT)
# A hold less its seq and region is the record its node names back (hold() slices, in C: they come by
# the thousand): the two declarations must agree
if HeldReplica._fields[2:] != RestoreRecord._fields:
    raise TypeError("HeldReplica less its seq and region_id must be RestoreRecord")
_KIND_HEADER = {kind: b"\x92" + msgpack.packb(kind) for kind in (_HOLD, _DROP, _BURY)}  # [kind, ...


def _write_all(fd: int, data: bytes) -> None:
    """Writes all of `data` or raises OSError: a write cut short (a full file system, a file size limit)
    would leave a torn record that ends every later replay there, the records after it (kills) unread."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _batch(kind: int, packed: list[bytes]) -> bytes:
    """The file record [kind, records] from records packed already (the bytes msgpack.packb writes)."""
    n = len(packed)
    if n < 16:
        header = bytes((0x90 | n,))
    else:
        header = b"\xdc" + n.to_bytes(2, "big") if n < 1 << 16 else b"\xdd" + n.to_bytes(4, "big")
    return _KIND_HEADER[kind] + header + b"".join(packed)


def _unpacked(packed: bytes) -> RestoreRecord:
    return RestoreRecord._make(msgpack.unpackb(packed))


def _gen(packed: bytes | None) -> int:
    """The allocation generation of a record (newer than any kill when there is none)."""
    return _EMPTY_GEN if packed is None else int(msgpack.unpackb(packed)[_GEN_AT])


def _record(raw: object) -> RestoreRecord:
    """A record read back from the file, checked field by field (ValueError when it is not one). One a
    node of the previous version wrote has no target (8 fields): it restores with none, as it did."""
    if not isinstance(raw, (list, tuple)) or len(raw) not in (8, 9):
        raise ValueError("a hold is 8 or 9 fields")
    offset, slot, gen, key, size, checksum, pinned, replicas, *rest = raw
    target = rest[0] if rest else 0
    ints = (offset, slot, gen, size, checksum, replicas, target)
    if not all(type(x) is int and x >= 0 for x in ints) or type(key) is not str or type(pinned) is not bool:
        raise ValueError("a hold's fields have the wrong types")
    return RestoreRecord(offset, slot, gen, key, size, checksum, pinned, replicas, target)


def _tomb(raw: object) -> tuple[str, int, float]:
    """A removal read back from the file (ValueError when it is not one)."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 3:
        raise ValueError("a removal is 3 fields")
    key, gen, until = raw
    if type(key) is not str or type(gen) is not int or gen < 0 or type(until) is not float:
        raise ValueError("a removal's fields have the wrong types")
    return key, gen, until


class SegmentCatalog:
    def __init__(self, path: str = "", secret: bytes = b"", max_log_bytes: int = 0) -> None:
        """`path`: the catalog's file (replayed now, then appended to); empty: kept in memory only.
        `secret`: the cluster secret, which the file's tags prove its writer knew. `max_log_bytes`: the
        file is compacted once it grows past this (and past twice what it holds); 0: by record count only."""
        self.path = path
        self.max_log_bytes = max_log_bytes
        self.lost = ""  # why the file was given up for memory only ("" while it is written, or never was)
        self._bytes = 0  # the file's size
        self._snapshot = 0  # its size after its last compaction
        self._key = catalog_key(secret)
        self._chain = b""  # the tag of the file's last record (its header's, before any)
        self._lock = threading.Lock()
        # By fence slot, each record msgpack-packed: a dict of ints and bytes is one the garbage collector
        # never walks (a record as a tuple re-tracked the dict at every hold, and each full collection
        # then walked all of it: 80 ms at 1.5M objects, on the thread that acknowledges holds)
        self._entries: dict[int, bytes] = {}
        self._tombs: dict[str, tuple[int, float]] = {}  # key -> (generation, until: wall clock), oldest first
        self._pack = msgpack.Packer().pack
        self._logged = 0
        self._fd = -1
        if path:
            self._replay()  # (and rewritten: a header, then what it held)
            try:
                if self.path:  # (else its rewrite failed, said once: kept in memory only)
                    self._fd = os.open(path, _APPEND)
            except OSError as exc:
                self._give_up(exc)

    def __len__(self) -> int:
        return len(self._entries)

    # -- what the master says -----------------------------------------------------------------------
    def hold(self, holds: Iterable[HeldReplica]) -> None:
        records = [h[2:] for h in holds]  # a hold less its seq and region is the record
        if not records:
            return
        packed = list(map(self._pack, records))
        with self._lock:
            self._entries.update(zip(map(_SLOT, records), packed, strict=True))
            self._write(_batch(_HOLD, packed))

    def drop(self, slots: list[int], gens: list[int], buried: list[int] | None = None) -> None:
        """The allocations (slot, gen) are killed: what an older or the same generation held is gone.
        `buried`: per kill, the generation its object's removal covers (0: the object lives on): those
        keys are remembered as removed (written before the drop: a kill mid-way leaves them named)."""
        with self._lock:
            entries = self._entries
            if buried is not None and any(buried):
                self._bury_held(slots, gens, buried)
            dropped = [(s, g) for s, g in zip(slots, gens, strict=True) if _gen(entries.get(s)) <= g]
            for slot, _ in dropped:
                entries.pop(slot, None)  # a slot named twice in one order is dropped once
            if dropped:
                self._append([_DROP, dropped])

    def _bury_held(self, slots: list[int], gens: list[int], buried: list[int]) -> None:
        until = time.time() + TOMB_SECONDS
        tombs: list[tuple[str, int, float]] = []
        for slot, gen, tomb in zip(slots, gens, buried, strict=True):
            packed = self._entries.get(slot)
            if tomb and packed is not None:
                record = msgpack.unpackb(packed)
                if record[_GEN_AT] <= min(gen, tomb):  # (the allocation killed, and one the removal covers)
                    tombs.append((record[_KEY_AT], tomb, until))
        if tombs:
            self._note_tombs(tombs)
            self._append([_BURY, tombs])

    def _note_tombs(self, tombs: Iterable[tuple[str, int, float]]) -> None:
        own = self._tombs
        for key, gen, until in tombs:
            old = own.pop(key, None)
            own[key] = (gen if old is None else max(gen, old[0]), until)
        while len(own) > MAX_TOMBS:
            del own[next(iter(own))]

    def removed(self) -> list[Removal]:
        """What the master removed while this node held it (key, the generation the removal covers), for
        the node to name to a master it mounts with before it names anything it holds."""
        with self._lock:
            now = time.time()
            own = self._tombs
            for key in [k for k, (_, until) in own.items() if until <= now]:
                del own[key]
            return [Removal(key, gen) for key, (gen, _) in own.items()]

    def clear(self) -> None:
        """The segment's memory is new: nothing named before is in it."""
        with self._lock:
            self._entries.clear()
            self._rewrite()

    # -- what the node offers back ----------------------------------------------------------------------
    def verified(self, memory: np.ndarray) -> list[RestoreRecord]:
        """Every record whose bytes in `memory` still match its checksum, newest allocation first (when
        two overlap, the newer one was written over the older); the others are forgotten."""
        with self._lock:
            good, bad = [], []
            for r in sorted(map(_unpacked, self._entries.values()), key=lambda r: -r.gen):
                offset, size = r.offset, r.size
                inside = offset >= 0 and offset + size <= memory.size
                if inside and xxhash.xxh3_64_intdigest(memory[offset : offset + size].data) == r.checksum:
                    good.append(r)
                else:
                    bad.append(r)
            for r in bad:
                del self._entries[r.slot]
            if bad:
                self._append([_DROP, [(r.slot, r.gen) for r in bad]])
                log.warning("%d objects of the segment failed their checksum: dropped", len(bad))
            return good

    # -- the file ---------------------------------------------------------------------------------------
    def _replay(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            log.warning("cannot read the catalog %s (%s): starting afresh", self.path, exc)
            data = b""
        if data:
            self._apply(data)
        self._rewrite()

    def _apply(self, data: bytes) -> None:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
        unpacker.feed(data)
        try:
            for kind, items in self._sealed_records(unpacker, data):
                self._logged += 1
                if kind == _HOLD:
                    for r in items:
                        record = _record(r)
                        self._entries[record[1]] = self._pack(record)
                elif kind == _BURY:
                    self._note_tombs(_tomb(t) for t in items)
                else:
                    for slot, gen in items:
                        if _gen(self._entries.get(slot)) <= gen:
                            self._entries.pop(slot, None)
        except (ValueError, TypeError, IndexError, msgpack.UnpackException) as exc:
            log.warning("catalog %s ends in a damaged record (%s): the rest is ignored", self.path, exc)

    def _sealed_records(self, unpacker: msgpack.Unpacker, data: bytes) -> Iterable[tuple[int, list[Any]]]:
        """The file's records whose tags hold, in order, up to the first that does not (ValueError then):
        past the header, each record and its tag chained from the one before."""
        header = next(unpacker, None)
        if not (isinstance(header, list) and header[:2] == [_MAGIC, _VERSION]):
            raise ValueError("not a catalog of this version")
        chain = _tag(self._key, b"", data[: unpacker.tell()])
        while True:
            start = unpacker.tell()
            record = next(unpacker, None)
            if record is None:
                return
            end = unpacker.tell()
            tag = next(unpacker, None)
            if not isinstance(tag, bytes) or not hmac.compare_digest(
                tag, _tag(self._key, chain, data[start:end])
            ):
                raise ValueError("a record's tag does not hold (not written with this cluster's secret)")
            chain = tag
            yield record

    def _append(self, record: list[object]) -> None:
        self._write(msgpack.packb(record))

    def _write(self, data: bytes) -> None:
        if self._fd < 0:
            return
        tag = _tag(self._key, self._chain, data)
        try:
            _write_all(self._fd, data + _TAG_HEADER + tag)
        except OSError as exc:  # the objects stay served; only a restart would not find them
            self._give_up(exc)
            return
        self._chain = tag
        self._logged += 1
        self._bytes += len(data) + len(_TAG_HEADER) + len(tag)
        if (self._logged > COMPACT_MIN and self._logged > 4 * len(self._entries)) or self._too_big():
            self._rewrite()

    def _too_big(self) -> bool:
        """Past its byte bound, and mostly dead (a log of what is held only would be compacted again at
        every write: past the bound that way, the file system's room says whether it fits)."""
        return 0 < self.max_log_bytes < self._bytes and self._bytes > 2 * self._snapshot

    def _rewrite(self) -> None:
        """Replaces the log with one record of what is held (a new file, renamed over the old)."""
        if not self.path:
            return
        temporary = self.path + ".new"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        header = msgpack.packb([_MAGIC, _VERSION, os.urandom(16)])  # (no two files chain alike)
        chain = _tag(self._key, b"", header)
        record = _batch(_HOLD, list(self._entries.values()))
        tag = _tag(self._key, chain, record)
        data = header + record + _TAG_HEADER + tag
        if self._tombs:
            record = msgpack.packb([_BURY, [(k, g, until) for k, (g, until) in self._tombs.items()]])
            tag = _tag(self._key, tag, record)
            data += record + _TAG_HEADER + tag
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
            self._give_up(exc)
            return
        self._logged = 2 if self._tombs else 1
        self._bytes = self._snapshot = len(data)
        self._chain = tag
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = os.open(self.path, _APPEND)

    def _give_up(self, exc: OSError) -> None:
        """The file cannot take a record (its file system is full, or failing): the catalog is kept in
        memory from now on, said once, and the file goes. A file missing a record could name, after a
        restart, an object removed since; one line per write batch said nothing more."""
        log.warning(
            "cannot write the catalog %s (%s): what this node holds will not survive its restart; the "
            "catalog is kept in memory from now on",
            self.path,
            exc,
        )
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.path = ""
        self.lost = f"cannot write its catalog ({exc.strerror or exc}): what it holds is lost at a restart"

    def close(self, remove: bool = False) -> None:
        """Closes the file; `remove`: deletes it (the node leaves for good: nothing will be restored)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
            if remove and self.path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
