"""The disk tier's index: an append-only file beside the disk file naming every record written (offset,
key, size, checksum), so a restarted node can offer its records again, and the removals of objects whose
records it dropped (kept TOMB_SECONDS, at most MAX_TOMBS, as the memory tier's catalog keeps its own), so
a memory replica that missed a removal's kill cannot bring the key back under the next master.

An entry is appended only after its record was written in full, so a node killed mid-demotion loses at
most the records being written. Entries are never trusted: at start every one is checked against its
record (header and bytes), and only intact, current ones are kept (the index is then rewritten with just
those). A torn last entry (a kill mid-append) is where reading stops. While the node runs, the index is
rewritten with the latest entry per record offset once it holds more than twice as many entries plus
COMPACT_SLACK, so it stays proportional to the disk, not to the demotions ever made.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import time
from typing import NamedTuple

import xxhash

from kvstore.node.catalog import MAX_TOMBS, TOMB_SECONDS
from kvstore.rpc.messages import Removal

_ENTRY = struct.Struct("<QQQI")  # record offset, object size, checksum, key length; key; [gen]; entry hash
_GEN = struct.Struct("<Q")
# In the key length: a generation follows the key (entries written before it was named have none: 0)
HAS_GEN = 1 << 31
COMPACT_SLACK = 4096  # entries an index may carry beyond twice its live ones before it is rewritten
TOMBSTONE = 0  # an entry of size 0: the record of that key at that offset is dead (objects are not empty)
# A tombstone with a generation also remembers the key's removal (a master removed the object: covering
# that generation; its checksum field: until when, in wall-clock seconds), named to the next master.


class IndexEntry(NamedTuple):
    offset: int
    key: str
    size: int
    checksum: int
    gen: int = 0  # of the replica the record was written from: a master that removed it since refuses it


def encode(entry: IndexEntry) -> bytes:
    raw = entry.key.encode()
    if entry.gen:
        body = _ENTRY.pack(entry.offset, entry.size, entry.checksum, len(raw) | HAS_GEN) + raw
        body += _GEN.pack(entry.gen)
    else:
        body = _ENTRY.pack(entry.offset, entry.size, entry.checksum, len(raw)) + raw
    return body + struct.pack("<Q", xxhash.xxh3_64_intdigest(body))


def decode_all(data: bytes) -> list[IndexEntry]:
    """Entries in order, up to the first torn or damaged one."""
    out = []
    at = 0
    while at + _ENTRY.size + 8 <= len(data):
        offset, size, checksum, key_len = _ENTRY.unpack_from(data, at)
        has_gen, key_len = key_len & HAS_GEN, key_len & ~HAS_GEN
        key_end = at + _ENTRY.size + key_len
        end = key_end + (_GEN.size if has_gen else 0)
        if key_len > 4096 or end + 8 > len(data):
            break
        (digest,) = struct.unpack_from("<Q", data, end)
        if digest != xxhash.xxh3_64_intdigest(data[at:end]):
            break
        try:
            key = data[at + _ENTRY.size : key_end].decode()
        except UnicodeDecodeError:
            break
        gen = _GEN.unpack_from(data, key_end)[0] if has_gen else 0
        out.append(IndexEntry(offset, key, size, checksum, gen))
        at = end + 8
    return out


class DiskIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self._latest: dict[int, IndexEntry] = {}  # per record offset, as the file says
        self._removals: dict[str, tuple[int, int]] = {}  # key -> (generation, until), oldest first
        self._in_file = 0  # entries in the file

    def read(self) -> list[IndexEntry]:
        """The latest entry per record offset (a later record at an offset replaced the earlier one)."""
        try:
            with open(self.path, "rb") as f:
                entries = decode_all(f.read())
        except FileNotFoundError:
            entries = []
        self._latest, self._removals = {}, {}
        for entry in entries:
            self._note(entry)
        self._in_file = len(entries)
        return list(self._latest.values())

    def removed(self) -> list[Removal]:
        """[key, generation] of the removals remembered and not lapsed, oldest first."""
        now = time.time()
        return [Removal(key, gen) for key, (gen, until) in self._removals.items() if until > now]

    def _note(self, entry: IndexEntry) -> None:
        if entry.size != TOMBSTONE:
            self._latest[entry.offset] = entry
            return
        if (live := self._latest.get(entry.offset)) is not None and live.key == entry.key:
            del self._latest[entry.offset]  # a tombstone ends only the record it names
        if entry.gen:
            self._remember([(entry.key, entry.gen)], entry.checksum)

    def _remember(self, removals: list[tuple[str, int]], until: int) -> None:
        """Keeps these removals (in memory: the caller writes them) until `until`, the oldest dropped
        past MAX_TOMBS."""
        for key, gen in removals:
            old = self._removals.pop(key, (0, 0))
            self._removals[key] = (max(gen, old[0]), max(until, old[1]))
        for key in list(itertools.islice(self._removals, max(0, len(self._removals) - MAX_TOMBS))):
            del self._removals[key]

    def _removal_entries(self) -> list[IndexEntry]:
        """The removals not lapsed, as entries (first in a rewritten index: they end no record there)."""
        now = time.time()
        return [
            IndexEntry(0, k, TOMBSTONE, until, gen)
            for k, (gen, until) in self._removals.items()
            if until > now
        ]

    def rewrite(self, entries: list[IndexEntry]) -> None:
        """Replaces the index with `entries`, atomically (a kill leaves the old or the new one)."""
        temp = self.path + ".new"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)  # (left by a kill: made afresh, never written through whatever it is)
        # Readable by the node's user only: the index names every object key on the disk.
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        removals = self._removal_entries()
        with os.fdopen(fd, "wb") as f:
            f.write(b"".join(encode(e) for e in [*removals, *entries]))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.path)
        self._latest = {e.offset: e for e in entries}
        self._removals = {e.key: (e.gen, e.checksum) for e in removals}
        self._in_file = len(removals) + len(entries)

    def append(self, entries: list[IndexEntry]) -> None:
        """Appends entries, all or none: a write that fails (a full file system) is cut back off, so the
        index never holds a torn entry that would hide what is appended after it. OSError then."""
        if not entries:
            return
        self._append_bytes(b"".join(encode(e) for e in entries), keep=True)
        self._in_file += len(entries)
        for entry in entries:
            self._note(entry)
        if self._in_file > 2 * (len(self._latest) + len(self._removals)) + COMPACT_SLACK:
            self.rewrite(list(self._latest.values()))

    def try_room(self, nbytes: int) -> None:
        """Appends `nbytes` of entries that name nothing (tombstones of the empty key, which no object has)
        and cuts them back off: OSError when the file system has no room for an append that large (what a
        batch of demotions appends). A rewrite is no such test: it may need no new space at all."""
        entry = encode(IndexEntry(0, "", TOMBSTONE, 0))
        self._append_bytes(entry * max(1, nbytes // len(entry)), keep=False)

    def _append_bytes(self, data: bytes, keep: bool) -> None:
        """Appends `data` whole, or cuts the file back to its size before (always, unless `keep`):
        no torn entry stays to hide what is appended after it. OSError when it could not."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            before = os.fstat(fd).st_size
            kept = False
            try:
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
                kept = keep
            finally:
                if not kept:
                    os.ftruncate(fd, before)
        finally:
            os.close(fd)

    def rewrite_without(self, dead: set[tuple[int, str]]) -> None:
        """Rewrites the index with its live entries, less the (offset, key) records in `dead` (and the
        removals it remembers)."""
        self.rewrite([e for e in self._latest.values() if (e.offset, e.key) not in dead])

    def forget(self, records: list[tuple[int, str, int]]) -> None:
        """Marks these (offset, key, buried) records dead: a restart does not offer them again; `buried`
        (not 0): the generation the key's removal covers, remembered TOMB_SECONDS. OSError when the index
        cannot be written: the removals are remembered still, and written by the next rewrite."""
        until = int(time.time() + TOMB_SECONDS)
        try:
            self.append(
                [IndexEntry(offset, key, TOMBSTONE, until if b else 0, b) for offset, key, b in records]
            )
        except OSError:
            self._remember([(key, b) for _, key, b in records if b], until)
            raise

    @property
    def entries_in_file(self) -> int:
        return self._in_file
