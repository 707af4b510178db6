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


def test_bad_input_fails_alone_and_clearly() -> None:
    import numpy as np
    import pytest

    from kvstore import InvalidArgumentError, PermissionDeniedError
    from transfer_engine import TransferEngine
    from transfer_engine.units import parse_size

    with Store.embedded(segment_size="16MiB") as store:
        values = [np.full(4096, i, np.uint8) for i in range(3)]
        bad = -InvalidArgumentError.code
        assert store.batch_put_from(["good", "", "x" * 5000], values) == [0, bad, bad]  # per key
        out = [np.zeros(4096, np.uint8) for _ in range(3)]
        assert store.batch_get_into(["good", "y" * 5000, ""], out) == [4096, bad, bad]
        assert store.batch_get(["good", ""]) == [values[0].tobytes(), None]
        with pytest.raises(InvalidArgumentError, match="replicas"):
            store.put("k", b"v", replicas=0)  # not "the default"
    with pytest.raises(InvalidArgumentError, match="segment_size"):
        Store.connect("127.0.0.1:1", segment_size=2**64)
    with pytest.raises(InvalidArgumentError):
        parse_size(2**64)
    with TransferEngine() as engine, TransferEngine() as peer:
        frozen = engine.register(b"immutable bytes" * 300)  # registered read-only, not exported
        assert frozen.read_only and not frozen.exported
        with pytest.raises(InvalidArgumentError, match="read-only"):
            engine.register(b"x" * 4096, export=True)
        with pytest.raises(InvalidArgumentError, match="not mapped"):
            engine.register_ptr(1, 4096)
        assert not engine.register(bytearray(4096)).exported  # export is asked for explicitly
        remote = peer.allocate(1 << 16)
        target = engine.open_peer(peer.name)
        with pytest.raises(PermissionDeniedError):  # a read would write into the immutable object
            engine.read(frozen.addr, target, remote.id, 0, 4096)
        engine.write(frozen.addr, target, remote.id, 0, 4096)  # reading from it is fine
        assert remote.array is not None and bytes(remote.array[:15]) == b"immutable bytes"
