"""`kvstore node`: a storage process that contributes one segment to the pool and serves transfers."""

from __future__ import annotations

from typing import Any

from kvstore.client.session import Session
from kvstore.config import NodeConfig, StoreConfig
from kvstore.node.identity import NodeIdentity
from kvstore.node.storage import StorageNode, prepare_segment
from transfer_engine import Region
from transfer_engine.procs import READY_PREFIX, wait_for_stop_request


def run_node(node: NodeConfig, **client_settings: Any) -> None:
    """Serves until SIGTERM/SIGINT (or stdin EOF when its parent asked for that lifeline).

    `client_settings` set the node's client side in code (master, host, transport...); the rest comes
    from KVSTORE_* variables, then defaults.
    """
    config = StoreConfig.load(buffer_size=node.buffer_size, **client_settings)
    identity = NodeIdentity(node, config.master)
    prepared: list[Region] = []
    try:  # the node joins once its memory is ready (a node that joined first must heartbeat meanwhile)
        session = Session(
            config, identity.name, lambda engine: prepared.append(prepare_segment(engine, node))
        )
    except BaseException:
        identity.release()
        raise
    try:
        storage = StorageNode(session, node, prepared[0])
        session.start()
        pinned = f" pinned={storage.segment.pinned_by}" if node.pinned else ""
        d = storage.disk
        disk = f" disk={d.file.backend} restored={d.restored} dropped={d.dropped}" if d is not None else ""
        print(f"{READY_PREFIX}{session.engine.name} client={session.client_id}{pinned}{disk}", flush=True)
        wait_for_stop_request()
        storage.close()
    finally:
        session.close()
        identity.release()
