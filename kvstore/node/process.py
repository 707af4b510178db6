"""`kvstore node`: a storage process that contributes one segment to the pool and serves transfers."""

from __future__ import annotations

from typing import Any

from kvstore.cluster.session import Session
from kvstore.config import NodeConfig, StoreConfig
from kvstore.node import file_lock
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.identity import NodeIdentity
from kvstore.node.memory_tier import prepare_segment
from kvstore.node.node_key import forget as forget_node_key
from kvstore.node.node_key import load as load_node_key
from kvstore.node.segment_memory import SegmentFiles
from kvstore.node.storage import StorageNode
from kvstore.procs import settle_collector
from transfer_engine import Region
from transfer_engine.procs import READY_PREFIX, wait_for_stop_request


def run_node(node: NodeConfig, **client_settings: Any) -> None:
    """Serves until SIGTERM/SIGINT (or stdin EOF when its parent asked for that lifeline).

    `client_settings` set the node's client side in code (master, host, transport...); the rest comes
    from KVSTORE_* variables, then defaults.
    """
    config = StoreConfig.load(buffer_size=node.buffer_size, **client_settings)
    identity = NodeIdentity(node, config.master or f"etcd={config.etcd} cluster={config.cluster}")
    held: list[file_lock.Held] = []
    prepared: list[Region] = []
    try:
        # Its files are this node's alone, before any memory is made for them (a second node on the
        # same disk file stops here, naming the first)
        if node.disk:
            held.append(file_lock.hold(node.disk, "disk"))
        files = SegmentFiles.named(node.memory_dir, identity.stem)
        if files.memory:
            held.append(file_lock.hold(files.memory, "segment memory file"))
        reused = files.kept(node.segment_size)  # the memory a killed node with these settings left
        # the node joins once its memory is ready (a node that joined first must heartbeat meanwhile)
        session = Session(
            config,
            identity.name,
            lambda engine: prepared.append(prepare_segment(engine, node, files.memory)),
            load_node_key(identity.stem, node.disk),
        )
    except BaseException:
        _release(identity, held)
        raise
    try:
        catalog = SegmentCatalog(files.catalog, secret=session.master.secret)
        if not reused or not files.kept(node.segment_size):
            catalog.clear()  # new memory (or the file was given up for anonymous memory): nothing in it
        storage = StorageNode(session, node, prepared[0], catalog)
        session.start()
        pinned = f" pinned={storage.segment.pinned_by}" if node.pinned else ""
        d = storage.disk
        disk = f" disk={d.file.backend} restored={d.restored} dropped={d.dropped}" if d is not None else ""
        kept = f" kept={storage.kept}"
        engine, client = session.engine.name, session.client_id
        settle_collector()
        print(f"{READY_PREFIX}{engine} client={client}{kept}{pinned}{disk}", flush=True)
        wait_for_stop_request()
        storage.close(forget=True)  # a clean stop: the master forgets our objects, the memory goes
        files.remove()
        forget_node_key(identity.stem, node.disk)
    finally:
        session.close()
        _release(identity, held)


def _release(identity: NodeIdentity, held: list[file_lock.Held]) -> None:
    for key in held:
        file_lock.release(key)
    identity.release()
