"""`kvstore node`: a storage process that contributes one segment to the pool and serves transfers."""

from __future__ import annotations

from kvstore.client.store import Store
from transfer_engine.procs import READY_PREFIX, wait_for_stop_request


def run_node(master: str, segment_size: int, host: str = "127.0.0.1", protocol: str = "auto") -> None:
    """Serves until SIGTERM/SIGINT, or until stdin closes when it is a pipe (a parent's lifeline)."""
    with Store.connect(
        master, segment_size=segment_size, buffer_size="4MiB", host=host, protocol=protocol
    ) as store:
        print(f"{READY_PREFIX}{store.engine.name} client={store.client_id}", flush=True)
        wait_for_stop_request()
