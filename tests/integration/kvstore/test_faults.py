"""The store's promise under faults, with real processes: a paused master, hostile but legal input."""

from __future__ import annotations

import signal
import time

from kvstore import Store
from kvstore.procs import kvstore_process
from tests.conftest import freeze


def test_a_master_paused_longer_than_the_client_ttl_keeps_every_client_and_object() -> None:
    """SIGSTOP the master for longer than the client TTL: every process is alive, so nobody may be
    dropped when it continues (the silence was the master's own). Was: every client and object gone."""
    options = ["--client-ttl", "2", "--heartbeat-interval", "0.3"]
    with kvstore_process(["master", "--port", "0", *options]) as (master, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "16MiB"]
        with kvstore_process(node), Store.connect(address, rpc_timeout=5.0) as store:
            keys = [f"paused/{i}" for i in range(20)]
            store.batch_put_from(keys, [bytes([i]) * 4096 for i in range(20)])
            freeze(master.pid)
            time.sleep(3.5)  # > client TTL
            master.send_signal(signal.SIGCONT)
            time.sleep(1.5)  # several housekeeping ticks after the pause
            stats = store.stats()["master"]
            assert stats["dropped_clients"] == 0 and stats["segments"] == 1 and stats["stalls"] >= 1
            assert all(store.batch_exists(keys))
            assert store.get("paused/7") == bytes([7]) * 4096
