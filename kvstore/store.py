"""`kvstore.Store`: the client API plus the roles a process may take beside it — contributing memory
(a storage node on the same session) and, for `Store.embedded`, a master in this process. A small
facade above kvstore.client, kvstore.node and kvstore.master; none of them imports it."""

from __future__ import annotations

from typing import Any

from kvstore.client.store import Closable
from kvstore.client.store import Store as ClientStore
from kvstore.cluster.session import Session
from kvstore.config import MasterConfig, NodeConfig, StoreConfig
from kvstore.master import Master
from kvstore.node import StorageNode


class Store(ClientStore):
    """A store client that contributes `segment_size` bytes to the pool when asked to (see
    kvstore.client.Store for every operation)."""

    @classmethod
    def start_roles(cls, session: Session, config: StoreConfig) -> list[Closable]:
        # A client's own segment: plain memory (a node's KVSTORE_NODE_* settings are not a client's).
        return (
            [StorageNode(session, NodeConfig(segment_size=config.segment_size))]
            if config.segment_size
            else []
        )

    @classmethod
    def embedded(
        cls, segment_size: int | str = "1GiB", master_config: dict[str, Any] | None = None, **settings: Any
    ) -> Store:
        """A master and a segment in this process: the default for examples and the main command.

        `master_config` sets MasterConfig fields; `settings` are the client's (see Store.connect).
        """
        # The master shares this process's GIL with the client: polling for requests would slow both.
        config = MasterConfig.load(**{"port": 0, "busy_poll_us": 0, **(master_config or {})})
        master = Master.start_in_thread(config)
        try:
            store = cls.connect(
                master.address, segment_size=segment_size, **{"rpc_busy_poll_us": 0, **settings}
            )
        except BaseException:
            master.stop()
            raise
        store.add_role(master)
        return store
