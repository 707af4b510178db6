"""A storage node's segment memory, made ready before the node joins: allocated at once, then faulted
in by several threads in chunks, with progress in the log (a 256 GiB segment takes minutes on one
thread; a node that joined first would be judged dead meanwhile).

The memory is a file in shared memory (NodeConfig.memory_dir: /dev/shm, or a hugetlbfs mount; in this
user's private directory there) named by the node's identity, beside the catalog of what it holds
(kvstore.node.catalog): a node killed and started again with the same settings maps the same bytes and
names them to the master. A node that stops cleanly removes both (it left the cluster, and the master
forgot its objects)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kvstore.errors import InvalidArgumentError, KVStoreError
from kvstore.local_files import discard_unadoptable, private_directory
from transfer_engine import Region, TransferEngine
from transfer_engine.units import format_size

log = logging.getLogger("kvstore.node")

CHUNK = 256 << 20  # bytes one thread faults in at a time
PROGRESS_SECONDS = 2.0
CATALOG_ROOM = 1 << 20  # room asked beside the segment's file for its catalog (records of what it holds)...
CATALOG_SHARE = 64  # ...or this fraction of the segment, when larger


def catalog_room(segment_size: int) -> int:
    """Room reserved beside a segment for its catalog. The catalog's log is compacted at half of it
    (SegmentCatalog.max_log_bytes), so the old log and its compacted copy fit together; what it holds
    alone outgrows that only with objects of under ~1 KiB filling the segment (~60 bytes a record)."""
    return max(CATALOG_ROOM, segment_size // CATALOG_SHARE)


def prefault_threads() -> int:
    """Threads that fault the segment in: the cores this process may use, at most 16."""
    return max(1, min(16, len(os.sched_getaffinity(0))))


@dataclass
class SegmentFiles:
    """Where a node's segment memory and its catalog live; empty paths: anonymous memory, a catalog in
    memory only (nothing survives the process)."""

    memory: str = ""
    catalog: str = ""

    @classmethod
    def named(cls, directory: str, stem: str) -> SegmentFiles:
        """The files of the node `stem` (its identity) in this user's private directory in `directory`
        (kvstore.local_files: `directory` itself when it is private already, else its kvstore-<uid>);
        none where there is no such directory to be had. A file found there that is not this user's own
        (owner, mode 0600, one link) is removed, not adopted: its memory starts afresh."""
        if not directory or not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            if directory:
                log.warning("%s is not a writable directory: the segment is anonymous memory", directory)
            return cls()
        try:
            private = private_directory(directory)
        except (OSError, KVStoreError) as exc:
            # (not a directory of this process's own, as the identity locks take: a node killed would
            # leave its whole segment there, and its next process would not find it anyway)
            log.warning(
                "no private directory for the segment (%s): it is anonymous memory, so what the node holds "
                "does not survive a kill of it (remove the directory another user made to have it back)",
                exc,
            )
            return cls()
        base = os.path.join(private, f"kvstore-node-{stem}")
        files = cls(base + ".mem", base + ".held")
        discard_unadoptable(files.memory, "segment memory file")
        discard_unadoptable(files.catalog, "segment catalog")
        return files

    def check_room(self, size: int) -> None:
        """Refuses a segment of `size` bytes whose directory has not the room for its file and catalog:
        tmpfs gives a file its pages only as they are touched, so the node found out while faulting them
        in and went on in anonymous memory, which a restart loses. What the file holds already counts."""
        if not self.memory:
            return
        directory = os.path.dirname(self.memory)
        try:
            usage = os.statvfs(directory)
        except OSError:
            return  # (its files' own errors say more, and fall back)
        free = usage.f_bavail * usage.f_frsize
        for path in (self.memory, self.catalog):
            with contextlib.suppress(FileNotFoundError):
                free += os.stat(path).st_blocks * 512
        if free < size + catalog_room(size):
            raise InvalidArgumentError(
                f"the memory dir's file system ({directory}) has {format_size(free)} free, too little for a "
                f"{format_size(size)} segment and its catalog ({format_size(catalog_room(size))}): give it "
                "more room (a larger tmpfs; in a container, --shm-size), choose another --memory-dir "
                "(KVSTORE_NODE_MEMORY_DIR), a smaller --segment-size, or --memory-dir '' for anonymous "
                "memory, which a restart of the node loses"
            )

    def kept(self, size: int) -> bool:
        """The memory file is there with `size` bytes: what it holds is what the last node left."""
        try:
            return bool(self.memory) and os.stat(self.memory).st_size == size
        except FileNotFoundError:
            return False

    def remove(self) -> None:
        for path in (self.memory, self.catalog):
            if path:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def ready_segment(
    engine: TransferEngine, size: int, fence_slots: int, pinned: bool, backing_file: str = ""
) -> Region:
    """The node's segment, every page faulted in (a reused backing file keeps its bytes). Pinned memory
    is locked (and so faulted) in one go. A backing file the shared memory has no room for is given up
    for anonymous memory (said in the log)."""
    if backing_file:
        try:
            return _ready(engine, size, fence_slots, pinned, backing_file)
        except KVStoreError as exc:
            log.warning("cannot back the segment by %s (%s): anonymous memory instead", backing_file, exc)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(backing_file)
    return _ready(engine, size, fence_slots, pinned, "")


def _ready(engine: TransferEngine, size: int, fence_slots: int, pinned: bool, backing_file: str) -> Region:
    if pinned:
        return engine.allocate(size, fence_slots=fence_slots, pinned=True, backing_file=backing_file)
    began = time.monotonic()
    region = engine.allocate(size, fence_slots=fence_slots, populate=False, backing_file=backing_file)
    threads = prefault_threads()
    chunks = [(at, min(CHUNK, size - at)) for at in range(0, size, CHUNK)]
    done = 0
    reported = began
    with ThreadPoolExecutor(threads, thread_name_prefix="kvstore-prefault") as pool:
        futures = [pool.submit(engine.prefault, region, at, length) for at, length in chunks]
        try:
            for future, (_, length) in zip(futures, chunks, strict=True):
                future.result()
                done += length
                if time.monotonic() - reported >= PROGRESS_SECONDS:
                    reported = time.monotonic()
                    log.info("preparing the segment: %.1f of %.1f GiB", done / 2**30, size / 2**30)
        except BaseException:
            for f in futures:
                f.cancel()
            engine.unregister(region)
            raise
    seconds = time.monotonic() - began
    log.info(
        "segment of %s ready in %.1f s (%d threads, %.2f GB/s)",  # (not GiB: a small one read '0.0 GiB')
        format_size(size),
        seconds,
        threads,
        size / max(seconds, 1e-9) / 1e9,
    )
    return region
