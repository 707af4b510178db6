"""`kvstore node`: a storage process that contributes one segment to the pool and serves transfers."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kvstore import sd_notify
from kvstore.cluster.session import Session
from kvstore.cluster.shard_joins import ShardJoins, master_answers
from kvstore.cluster.shards import shard_configs
from kvstore.config import NodeConfig, StoreConfig
from kvstore.config.etcd import EtcdConfig
from kvstore.errors import InvalidArgumentError
from kvstore.node import file_lock
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.identity import NodeIdentity
from kvstore.node.memory_tier import prepare_segment
from kvstore.node.node_key import forget as forget_node_key
from kvstore.node.node_key import load as load_node_key
from kvstore.node.segment_memory import SegmentFiles, catalog_room
from kvstore.node.shard_disk import disk_of_shard, refuse_another_layout
from kvstore.node.storage import StorageNode
from kvstore.procs import say_ready, settle_collector
from kvstore.rpc import etcd
from transfer_engine import Region
from transfer_engine.procs import wait_for_stop_request

log = logging.getLogger("kvstore.node")


def run_node(node: NodeConfig, **client_settings: Any) -> None:
    """Serves until SIGTERM/SIGINT (or stdin EOF when its parent asked for that lifeline).

    `client_settings` set the node's client side in code (master, host, transport...); the rest comes
    from KVSTORE_* variables, then defaults. A master setting of several shards ("a;b",
    kvstore.cluster.shards) makes the node join each: a segment per shard (its memory split evenly),
    each with its own registration, identity and holds, so each shard restores from it on its own.
    """
    config = StoreConfig.load(buffer_size=node.buffer_size, **client_settings)
    if config.etcd:  # (etcd started beside this node may answer a little later)
        wait = EtcdConfig.load().start_wait
        shards = etcd.when_up(lambda: shard_configs(config), config.etcd, wait)
    else:
        shards = shard_configs(config)
    if node.disk:  # (before any shard is joined: records of another shard count would never be read)
        refuse_another_layout(node.disk, len(shards))
    # Each shard's session heartbeats from its join on (_joined), while the next shards' memory is still
    # being prepared: a shard that waited for all of them would forget this node meanwhile. A shard whose
    # master cannot be reached is joined once it answers (ShardJoins); one shard is joined or fails here.
    joins = ShardJoins(
        len(shards),
        lambda i: _joined(_shard_node(node, i, len(shards)), shards[i]),
        [_where(shard) for shard in shards],
        reach=lambda i: master_answers(shards[i]),  # (a try on a master that never answers: short)
        leave=_Member.leave,  # a clean stop: the master forgets our objects, the memory goes
    )
    try:
        joins.start(retry=len(shards) > 1)
        settle_collector()
        say_ready(_ready_fields(joins.members()))
        sd_notify.ready(f"node serving: {_ready_fields(joins.members())}")  # (Type=notify: deploy/systemd)
        wait_for_stop_request()
        joins.stop_joining()  # (a join still under way is left by its own thread)
        for member in joins.members():
            if member is not None:
                member.leave()
    finally:
        joins.close()


def _where(config: StoreConfig) -> str:
    return config.master or f"etcd={config.etcd} cluster={config.cluster}"


def _shard_node(node: NodeConfig, shard: int, shards: int) -> NodeConfig:
    """Shard `shard`'s part of this node: an even part of its memory, a name of its own."""
    if shards == 1:
        return node
    name = f"{node.name}-shard-{shard}" if node.name else ""
    if len(name) > 64:  # (the rule NodeConfig checks; replace() does not check it again)
        raise InvalidArgumentError(
            f"the node name {node.name!r} is too long to split over {shards} shards: with its "
            f"'-shard-{shard}' suffix it passes a node name's 64 characters"
        )
    part = dataclasses.replace(node, segment_size=node.segment_size // shards, name=name)
    if node.disk:
        part = disk_of_shard(part, shard, shards)
    part.validate()
    return part


@dataclasses.dataclass
class _Member:
    """This node in one shard: its session, its storage, what it leaves behind on a clean stop."""

    session: Session
    storage: StorageNode
    files: SegmentFiles
    identity: NodeIdentity
    node: NodeConfig

    def leave(self) -> None:
        self.storage.close(forget=True)
        self.files.remove()
        forget_node_key(self.identity.stem, self.node.disk)


@contextmanager
def _joined(node: NodeConfig, config: StoreConfig) -> Iterator[_Member]:
    """This node's segment, joined to the master of `config` (its session closed and its files let go
    on the way out)."""
    identity = NodeIdentity(node, _where(config))
    held: list[file_lock.Held] = []
    prepared: list[Region] = []
    made = False  # this start made the segment's memory file (removed if the start fails)
    try:
        # Its files are this node's alone, before any memory is made for them (a second node on the
        # same disk file stops here, naming the first)
        if node.disk:
            held.append(file_lock.hold(node.disk, "disk"))
        files = SegmentFiles.named(node.memory_dir, identity.stem)
        existed = bool(files.memory) and os.path.lexists(files.memory)  # (the lock below creates it)
        if files.memory:
            held.append(file_lock.hold(files.memory, "segment memory file"))
            made = not existed  # (once the lock is ours: a start refused there removes nothing)
        files.check_room(node.segment_size)
        reused = files.kept(node.segment_size)  # the memory a killed node with these settings left
        # the node joins once its memory is ready (a node that joined first must heartbeat meanwhile)
        session = Session(
            config,
            identity.name,
            lambda engine: prepared.append(prepare_segment(engine, node, files.memory)),
            load_node_key(identity.stem, node.disk),
        )
    except BaseException:
        if made:  # (still held: no other node has opened it meanwhile)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(files.memory)
        _release(identity, held)
        raise
    try:
        if files.memory and not files.kept(node.segment_size):  # given up for anonymous memory (said):
            files = _anonymous(files)  # (another process took the room between the check and the file)
        room = catalog_room(node.segment_size) // 2
        catalog = SegmentCatalog(files.catalog, secret=session.master.secret, max_log_bytes=room)
        if not reused or not files.kept(node.segment_size):
            catalog.clear()  # new memory: nothing in it
        member = _Member(session, StorageNode(session, node, prepared[0], catalog), files, identity, node)
        session.start()  # heartbeats from here on
        session.master.close_this_threads_connection()  # (this thread calls again only to leave)
        yield member
    finally:
        session.close()
        _release(identity, held)


def _anonymous(files: SegmentFiles) -> SegmentFiles:
    """No files for a segment in anonymous memory: a catalog of it would name, after a restart, objects
    in memory that is gone (and kept in a directory that is full, fail at every write)."""
    files.remove()
    log.warning(
        "the segment is anonymous memory, not a file in its memory dir: what this node holds does not "
        "survive its restart"
    )
    return SegmentFiles()


def _ready_fields(joined: list[_Member | None]) -> str:
    """The readiness line's fields: one node as before; a node of S shards gives each field per shard,
    ','-joined in shard order ('-' for a shard not joined yet: its master did not answer)."""
    first = next(m for m in joined if m is not None) if any(joined) else None
    if first is None:
        return "- client=- kept=-"
    storage = first.storage
    pinned = f" pinned={storage.segment.pinned_by}" if first.node.pinned else ""
    d = storage.disk
    disks = [m.storage.disk if m else None for m in joined]  # (each shard's own file: a field each)
    restored = ",".join(str(x.restored) if x else "-" for x in disks)
    dropped = ",".join(str(x.dropped) if x else "-" for x in disks)
    disk = f" disk={d.file.backend} restored={restored} dropped={dropped}" if d is not None else ""
    engines = ",".join(m.session.engine.name if m else "-" for m in joined)
    clients = ",".join(m.session.client_id if m else "-" for m in joined)
    kept = ",".join(str(m.storage.kept) if m else "-" for m in joined)
    return f"{engines} client={clients} kept={kept}{pinned}{disk}"


def _release(identity: NodeIdentity, held: list[file_lock.Held]) -> None:
    for key in held:
        file_lock.release(key)
    identity.release()
