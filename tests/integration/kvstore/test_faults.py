"""The store's promise under faults, with real processes: a paused master, hostile but legal input."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from kvstore import Store
from kvstore.procs import kvstore_process
from tests.conftest import freeze
from tests.integration.kvstore.conftest import Cluster, corrupt_in_place


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
    from transfer_engine import Op, TransferEngine
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
        # A lone surrogate cannot be encoded (UTF-8): was a UnicodeEncodeError for the whole batch.
        lone = "block/\udc80"
        assert store.batch_put_from(["good2", lone], values[:2]) == [0, bad]
        assert store.batch_get(["good", lone]) == [values[0].tobytes(), None]
        assert store.batch_get_into([lone, "good"], out[:2]) == [bad, 4096]
        assert store.batch_exists([lone, "good"]) == [False, True]
        assert store.batch_remove([lone, "good2"]) == [bad, 0]
        assert store.locate([lone])[0] is None
        assert store.match_prefix(["good", lone, "good"]).matched == 1
        with pytest.raises(InvalidArgumentError, match="UTF-8"):
            store.exists(lone)
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
        # Was a pybind11 signature dump (TypeError): now a clear error naming the bound.
        with pytest.raises(InvalidArgumentError, match="2\\*\\*64"):
            engine.transfer_one(Op.READ, remote.addr, target, remote.id, 2**64, 16)
        with pytest.raises(InvalidArgumentError, match="uint64"):
            engine.submit(Op.READ, [remote.addr], target, remote.id, [2**64], 16)


def _eventually(done: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_corrupt_replica_is_reported_dropped_and_leaves_no_bytes_behind(cluster: Cluster) -> None:
    import numpy as np

    from kvstore import MISS
    from kvstore.rpc import messages as m

    payload = bytes(range(256)) * 16
    with Store.connect(cluster.master) as store:
        store.put("two", payload, replicas=2)
        (found,) = store.master.call(m.GetReplicas(keys=["two"]))
        corrupt_in_place(cluster, found.locations[0])
        for _ in range(100):  # reads pick a replica at random: until one meets the bad one
            store.leases.clear()
            assert store.get("two") == payload  # never the corrupt bytes: the other replica answers
            if store.stats_local.checksum_mismatches:
                break
        assert store.stats_local.checksum_mismatches == 1

        def locations() -> list[object]:
            (after,) = store.master.call(m.GetReplicas(keys=["two"]))
            return [r[:5] for r in after.locations]

        # the bad replica is dropped once its node confirmed its bytes fail (a check on its work channel)
        _eventually(lambda: locations() == [found.locations[1][:5]])
        assert store.stats()["master"]["corrupt_replicas"] == 1

        store.put("one", payload)
        (single,) = store.master.call(m.GetReplicas(keys=["one"]))
        corrupt_in_place(cluster, single.locations[0])
        buffer = np.full(len(payload), 7, np.uint8)
        store.register_buffer(buffer)  # zero-copy: the transfer lands in the caller's memory
        assert store.get_into("one", buffer) == MISS
        assert not buffer.any()  # a miss leaves no corrupt bytes behind (documented)
        _eventually(lambda: not store.exists("one"))  # its only replica was bad: the object is gone


def test_a_corrupt_value_in_a_batch_read_misses_alone(cluster: Cluster) -> None:
    """A batch of single-replica keys read in one plan (kvstore.client.read_plan), into one buffer per key
    or into scattered pieces: the key whose bytes do not verify goes again through the general path,
    which finds them bad too, reports them and clears its buffer; every other key of the batch is a hit."""
    import numpy as np

    from kvstore import MISS
    from kvstore.rpc import messages as m

    n, size = 8, 4096
    values = [bytes([i]) * size for i in range(1, n + 1)]
    keys = [f"batch-{i}" for i in range(n)]
    with Store.connect(cluster.master) as store:
        assert store.batch_put_from(keys, values) == [0] * n
        found = store.master.call(m.GetReplicas(keys=keys))
        corrupt_in_place(cluster, found[3].locations[0])
        buffer = np.full(n * size, 7, np.uint8)
        store.register_buffer(buffer)
        views = [buffer[i * size : (i + 1) * size] for i in range(n)]
        assert store.batch_get_into(keys, views) == [size] * 3 + [MISS] + [size] * (n - 4)
        assert [bytes(v) for v in views[:3] + views[4:]] == values[:3] + values[4:]
        assert not views[3].any()  # no corrupt bytes left behind
        assert store.stats_local.checksum_mismatches == 1 and store.stats_local.hits == n - 1
        # the same into values of two pieces each, scattered (a paged cache's layout): read whole
        halves = np.full((2, n, size // 2), 7, np.uint8)
        store.register_buffer(halves)
        addrs = [halves[h, i].ctypes.data for i in range(n) for h in (1, 0)]
        got = store.batch_get_into_pieces(keys, addrs, [size // 2] * (2 * n), [2] * n)
        assert got == [size] * 3 + [MISS] + [size] * (n - 4)
        for i in (0, 1, 2, 4, 5, 6, 7):
            assert bytes(halves[1, i]) + bytes(halves[0, i]) == values[i]
        assert not halves[:, 3].any()  # (bad bytes again, or fenced off by now once its node confirmed)
        _eventually(lambda: not store.exists(keys[3]))  # reported, confirmed by its node, dropped


def test_a_dead_node_is_avoided_within_a_heartbeat_not_after_the_client_ttl() -> None:
    """SIGKILL one of two nodes: once a client failed to reach it and the node missed a heartbeat (one
    client's word alone is not enough: issue 22), its replicas stop being offered and written to, long
    before the master's TTL would drop it; a put asking for two replicas names the cause instead of "no
    space"."""
    import pytest

    from kvstore import NotEnoughSegmentsError

    with kvstore_process(["master", "--port", "0", "--client-ttl", "60"]) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "16MiB"]
        with kvstore_process(node) as (first, _), kvstore_process(node), Store.connect(address) as store:
            keys = [f"k{i}" for i in range(12)]
            assert store.batch_put_from(keys, [bytes([i]) * 8192 for i in range(12)]) == [0] * 12
            assert store.put("both", b"b" * 8192, replicas=2) is None
            first.kill()
            first.wait()
            started = time.monotonic()
            values = store.batch_get(keys)  # the dead node's keys miss once; the client reports it
            survivors = [k for k, v in zip(keys, values, strict=True) if v is not None]
            assert 0 < len(survivors) < len(keys)
            deadline = time.monotonic() + 5  # (heartbeats every second; the master judges every second)
            while store.batch_exists(keys) != [v is not None for v in values]:  # until no longer offered
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert store.get("both") == b"b" * 8192
            with pytest.raises(NotEnoughSegmentsError, match="1 suspected unreachable"):
                store.put("two more", b"x", replicas=2)
            # Or, configured so, stored on the one usable node and said so per key.
            (result,) = store.batch_put_detailed(["degraded"], [[b"d" * 8192]], replicas=2, min_replicas=1)
            assert (result.code, result.replicas, result.asked, result.degraded) == (0, 1, 2, True)
            assert store.get("degraded") == b"d" * 8192 and store.stats_local.degraded_puts == 1
            assert store.put("lands on the live node", b"x") is None
            assert time.monotonic() - started < 10


def test_batches_larger_than_one_request_are_split_by_the_client() -> None:
    import numpy as np

    from kvstore.rpc import validate as v

    n = v.MAX_KEYS + 100
    with Store.embedded(segment_size="64MiB") as store:
        keys = [f"many/{i}" for i in range(n)]
        value = np.zeros(64, np.uint8)
        store.register_buffer(value)
        assert store.batch_put_from(keys, [value] * n) == [0] * n  # several put requests
        assert all(store.batch_exists(keys))
        match = store.match_prefix(keys)
        assert match.matched == n and len(match.replicas) == n and set(match.per_node.values()) == {n}
        assert store.batch_remove(keys) == [0] * n
        assert store.stats()["master"]["objects"] == 0


def test_a_hung_node_costs_one_timeout_not_one_per_call() -> None:
    """One of two nodes SIGSTOPped, TCP between client and nodes: the first batch that touches it waits
    for the I/O timeout, then the client reports it and every later read goes to the other replica
    (before: every batch waited the full timeout again)."""
    import numpy as np

    with kvstore_process(["master", "--port", "0", "--client-ttl", "60"]) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "32MiB"]
        with (
            kvstore_process(node) as (first, _),
            kvstore_process(node),
            Store.connect(address, transport="tcp", tcp_io_timeout=1.0) as store,
        ):
            keys = [f"h{i}" for i in range(32)]
            values = [np.full(16 << 10, i, np.uint8) for i in range(32)]
            assert store.batch_put_from(keys, values, replicas=2) == [0] * 32
            freeze(first.pid)
            try:
                buffers = [np.zeros(16 << 10, np.uint8) for _ in range(8)]
                started = time.monotonic()
                for round_ in range(21):  # the first may wait ~1 s; the 20 after it must not
                    store.leases.clear()
                    batch = [keys[(round_ * 8 + j) % 32] for j in range(8)]
                    assert store.batch_get_into(batch, buffers) == [16 << 10] * 8
                    for key, buffer in zip(batch, buffers, strict=True):
                        assert buffer[0] == int(key[1:])
                assert time.monotonic() - started < 4.0  # was ~21 s: one timeout per batch
            finally:
                first.send_signal(signal.SIGCONT)


def test_a_corrupt_read_into_raw_pieces_leaves_no_bytes_behind(cluster: Cluster) -> None:
    """The engines' path (many raw pieces in raw registrations) clears a failed read as well."""
    import numpy as np

    from kvstore import MISS
    from kvstore.rpc import messages as m

    payload = np.arange(3 * 8192, dtype=np.uint32).view(np.uint8)[: 3 * 8192]
    layers = [np.full(1 << 16, 7, np.uint8) for _ in range(3)]
    with Store.connect(cluster.master) as store:
        for layer in layers:
            store.register_buffer((layer.ctypes.data, layer.nbytes))
        pieces = [(layer.ctypes.data + 4096, 8192) for layer in layers]
        store.put("pieces", payload)
        (found,) = store.master.call(m.GetReplicas(keys=["pieces"]))
        corrupt_in_place(cluster, found.locations[0])
        assert store.batch_get_into_multi_buffers(["pieces"], [pieces]) == [MISS]
        for layer in layers:
            assert not layer[4096 : 4096 + 8192].any()  # cleared, every piece
            assert (layer[:4096] == 7).all() and (layer[4096 + 8192 :] == 7).all()  # nothing else


def test_a_node_with_a_large_segment_joins_once_its_memory_is_ready() -> None:
    """A node whose memory takes longer to fault in than the client TTL. Was: it registered first and
    sent no heartbeat until its memory was ready, so it was dropped while starting (a 4 GiB node on a busy
    2-core machine at the 10 s TTL): clients saw "unknown client", put errors, or reads failing."""
    master = ["master", "--port", "0", "--heartbeat-interval", "0.2", "--client-ttl", "1"]
    with kvstore_process(master) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "2GiB"]  # seconds to fault in, here
        with kvstore_process(node), Store.connect(address) as store:
            keys = [f"ready/{i}" for i in range(64)]
            values = [bytes([i]) * 65536 for i in range(64)]
            assert store.batch_put_from(keys, values) == [0] * 64
            assert store.batch_get(keys) == values
            stats = store.stats()["master"]
            assert stats["dropped_clients"] == 0 and stats["segments"] == 1
            assert stats["capacity"] == 2 << 30
