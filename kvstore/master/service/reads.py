"""Where readers find objects: a location per key in every tier that serves it, with a read lease. An
object only on a disk tier is read from the disk file by a reader on the disk's host (or through the
disk's node, which serves the file); for other readers it is loaded into memory first, and the answer
waits for those loads (a load that fails or takes too long is a miss).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from kvstore.master.ledger.locations import disk_location, memory_location
from kvstore.master.ledger.objects import ObjectMeta
from kvstore.master.planners.disk_tier import DiskTier
from kvstore.master.service.access import Access
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed, unpack


@dataclass
class Lookup:
    # per key asked: its location already (in memory: an ObjectLocation, or a list of its fields), the
    # object (only on disk), or None (a miss)
    metas: list[m.ObjectLocation | list[Any] | ObjectMeta | None]
    from_file: dict[str, str] = field(default_factory=dict)  # key -> "here" | "served" (disk_location)
    loading: list[ObjectMeta] = field(default_factory=list)  # to load into memory before answering
    reply: Packed | None = None  # the whole reply, encoded in the table: every hit was in memory


def look_up(access: Access, disk: DiskTier, keys: list[str], host_id: str, prefix: bool) -> Lookup:
    """Each key's object with a fresh lease, and how a reader on `host_id` reads those only on disk.
    `prefix`: the keys after the first miss are misses too (and not counted as reads)."""
    if access.any_suspect():
        return _look_up_each(access, disk, keys, host_id, prefix)
    # The usual case: one crossing into the table for the batch; objects in memory are located at once
    # (their lease keeps the locations good until the reply is sent, loads or not).
    reply, not_in_memory = access.locate_many(keys, prefix)
    if not not_in_memory:
        return Lookup([], reply=Packed(reply))
    found = Lookup(unpack(reply))  # (rare: some hit is only on disk; its entry is nil, the object goes there)
    for i, key, *_ in not_in_memory:
        meta = found.metas[i] = access.objects[key]
        _read_disk_only(disk, meta, host_id, found)
    return found


def _read_disk_only(disk: DiskTier, meta: ObjectMeta, host_id: str, found: Lookup) -> None:
    how = disk.read_from_file(meta, host_id)
    if how:
        found.from_file[meta.key] = how
    else:
        found.loading.append(meta)


def _look_up_each(access: Access, disk: DiskTier, keys: list[str], host_id: str, prefix: bool) -> Lookup:
    """look_up while a segment is suspect: key by key, offering no replica of a suspect segment."""
    found = Lookup([])
    for key in keys:
        meta = access.get_replicas(key)
        found.metas.append(meta)
        if meta is None:
            if prefix:
                found.metas.extend([None] * (len(keys) - len(found.metas)))
                break
        elif not access.offered(meta):
            _read_disk_only(disk, meta, host_id, found)
    return found


def load_all(disk: DiskTier, loading: list[ObjectMeta], done: Callable[[], object]) -> None:
    """Loads the objects into memory; `done()` runs once every load ended, either way."""
    pending = len(loading)

    def one_done() -> None:
        nonlocal pending
        pending -= 1
        if pending == 0:
            done()

    for meta in loading:
        if not disk.load(meta, one_done):
            one_done()  # no memory for it now: a miss


def locations(access: Access, found: Lookup) -> list[m.ObjectLocation | None] | Packed:
    """What readers are told: per key its locations (memory replicas offered, else its disk record when
    it is read from the file), or None; encoded already when the table encoded it."""
    if found.reply is not None:  # (the usual case: every hit in memory, the reply encoded in the table)
        return found.reply
    offered = access.offered
    out: list[m.ObjectLocation | None] = []
    for meta in found.metas:
        if meta is None or isinstance(meta, (list, tuple)):  # a location (an ObjectLocation is a tuple)
            out.append(cast(m.ObjectLocation | None, meta))
            continue
        where = [memory_location(x) for x in offered(meta)]
        how = found.from_file.get(meta.key)
        if not where and meta.disk is not None and how:
            where = [disk_location(meta.disk, how == "here")]
        # none: not loaded in time, or no longer on disk: a miss
        out.append(m.ObjectLocation(meta.size, meta.checksum, where) if where else None)
    return out


def prefix_match(access: Access, keys: list[str]) -> m.PrefixMatch:
    """How many leading keys are stored, where each lives, and per node its own leading run."""
    matched = access.match_prefix(keys)
    where = [sorted({x.segment.engine for x in access.offered(meta)}) for meta in matched]
    per_node: dict[str, int] = {}
    for engine in {e for engines in where for e in engines}:
        n = 0
        while n < len(where) and engine in where[n]:
            n += 1
        per_node[engine] = n
    return m.PrefixMatch(len(matched), where, per_node)
