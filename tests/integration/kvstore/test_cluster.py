"""A real cluster: master and storage nodes in their own processes, clients here."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest

from kvstore import MISS, ObjectBusyError, ObjectExistsError, Store, rpc
from kvstore.config.security import SecurityConfig
from kvstore.rpc import messages as m
from tests.helpers.master_wire import MasterWire
from tests.integration.kvstore.conftest import Cluster, corrupt_in_place, wait_for_mounts

rng = np.random.default_rng(11)


def value(n: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_data_verified_across_processes(shared_cluster: Cluster) -> None:
    with Store.connect(shared_cluster.master) as store:
        sizes = [1, 100, 4096, 65537, 1 << 20, 3 << 20]
        for i, n in enumerate(sizes):
            store.put(f"k{i}", value(n, i), replicas=1 + i % 2)
        for i, n in enumerate(sizes):
            assert store.get(f"k{i}") == value(n, i)
        assert store.get("absent") is None
        # Zero-copy batch into registered numpy buffers.
        out = np.zeros((len(sizes), 3 << 20), dtype=np.uint8)
        store.register_buffer(out)
        results = store.batch_get_into([f"k{i}" for i in range(len(sizes))] + ["absent"], [*out, out[0]])
        assert results == [*sizes, MISS]
        for i, n in enumerate(sizes):
            assert out[i, :n].tobytes() == value(n, i)
        # Multi-buffer: one key, several buffers (e.g. K and V).
        k_part, v_part = np.full(1000, 1, np.uint8), np.full(3000, 2, np.uint8)
        assert store.batch_put_from_multi_buffers(["kv"], [[k_part, v_part]]) == [0]
        k_out, v_out = np.zeros(1000, np.uint8), np.zeros(3000, np.uint8)
        assert store.batch_get_into_multi_buffers(["kv"], [[k_out, v_out]]) == [4000]
        assert (k_out == 1).all() and (v_out == 2).all()
        assert store.get("kv") == k_part.tobytes() + v_part.tobytes()
        # Writing an existing key: same bytes is fine, different bytes is refused.
        store.put("k0", value(1, 0))
        with pytest.raises(ObjectExistsError):
            store.put("k0", b"x")
        assert store.batch_exists(["k0", "nope", "kv"]) == [True, False, True]
        assert store.batch_get(["k1", "nope", "k2"]) == [value(100, 1), None, value(4096, 2)]
        assert store.batch_remove(["k1", "nope"], force=True) == [0, MISS]  # k1 is leased: force
        assert store.batch_exists(["k1", "k2"]) == [False, True]


def test_killed_node_loses_only_its_keys(cluster: Cluster) -> None:
    with Store.connect(cluster.master) as store:
        keys = [f"n{i}" for i in range(40)]
        assert store.batch_put_from(keys, [value(64 << 10, i) for i in range(40)]) == [0] * 40
        homes = {
            k: found.locations[0].engine
            for k, found in zip(keys, store.master.call(m.GetReplicas(keys=keys)), strict=True)
        }
        victim_proc, victim = cluster.nodes[0]
        assert victim in homes.values()
        victim_proc.send_signal(signal.SIGKILL)
        victim_proc.wait()
        out = [np.zeros(64 << 10, np.uint8) for _ in keys]
        results = store.batch_get_into(keys, out)
        for i, k in enumerate(keys):
            if homes[k] == victim:
                assert results[i] == MISS
            else:
                assert results[i] == 64 << 10 and out[i].tobytes() == value(64 << 10, i)
        # After the TTL the master forgets the dead node's replicas; new puts land on the survivor.
        deadline = time.monotonic() + 10
        while store.stats()["master"]["segments"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.stats()["master"]["segments"] == 1
        assert sum(store.batch_exists(keys)) == sum(1 for k in keys if homes[k] != victim)
        store.put("after", b"still works")
        assert store.get("after") == b"still works"


def test_full_pool_keeps_accepting_puts_by_evicting(cluster: Cluster) -> None:
    with Store.connect(cluster.master) as store:
        chunk = np.zeros(1 << 20, np.uint8)
        store.register_buffer(chunk)
        for i in range(4 * 128):  # 4x the pool (2 x 64 MiB)
            chunk[:8] = np.frombuffer(i.to_bytes(8, "little"), np.uint8)
            assert store.batch_put_from([f"fill{i}"], [chunk]) == [0], f"put {i} failed"
        stats = store.stats()["master"]
        assert stats["evictions"] > 0 and stats["usage"] <= 1.0
        got = store.get("fill511")
        assert got is not None and int.from_bytes(got[:8], "little") == 511


def test_concurrent_clients(shared_cluster: Cluster) -> None:
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            with Store.connect(shared_cluster.master) as store:
                for i in range(30):
                    key = f"w{w}/{i}"
                    store.put(key, value(10_000 + i, w * 100 + i))
                    assert store.get(key) == value(10_000 + i, w * 100 + i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors


def test_checksum_mismatch_is_a_miss_never_bytes(shared_cluster: Cluster) -> None:
    with Store.connect(shared_cluster.master) as store:
        store.put("victim", value(4096, 1))
        locations = store.master.call(m.GetReplicas(keys=["victim"]))[0].locations
        corrupt_in_place(shared_cluster, locations[0])
        assert store.get("victim") is None
        assert store.get_into("victim", bytearray(4096)) == MISS
        # The reported replica is dropped and fenced off: the lease-cached location is refused (or, before
        # the node applied the fence, fails its checksum again), then asked afresh: a miss.
        local = store.stats_local
        assert local.checksum_mismatches >= 1 and local.checksum_mismatches + local.stale_locations >= 2


def test_freed_and_reused_region_is_never_read_as_the_old_key(shared_cluster: Cluster) -> None:
    with Store.connect(shared_cluster.master) as store:
        store.put("old", value(8192, 1))
        stale = store.master.call(m.GetReplicas(keys=["old"]))  # a reader holds the old location
        store.remove("old", force=True)
        store.put("new", value(8192, 2))  # same size: may take the same offset
        buf = np.zeros(8192, np.uint8)
        (target,) = store.buffers.values([[buf]], writable=True)
        try:
            assert store.reads.read(["old"], [target], stale, [False]) == [MISS]
        finally:
            target.release(store.buffers)
        assert store.get("new") == value(8192, 2)


def test_remove_waits_for_leases(shared_cluster: Cluster) -> None:
    with Store.connect(shared_cluster.master) as store:
        store.put("leased", b"abc")
        assert store.get("leased") == b"abc"
        with pytest.raises(ObjectBusyError):
            store.remove("leased")
        time.sleep(1.1)  # lease TTL is 1 s in this cluster
        store.remove("leased")
        assert not store.exists("leased")


def _raw_call(address: str, payload: bytes) -> object:
    """Sends `payload` on a connection that passed the authentication (the suite's cluster secret)."""
    with MasterWire(address, SecurityConfig.load().secret()) as wire:
        wire.send(payload)  # (sealed with the connection's MAC, as a client's frames are)
        return wire.reply()


@pytest.mark.parametrize(
    "payload",
    [
        b"\x05\x00\x00\x00hello",  # not msgpack
        b"\xff\xff\xff\x7f",  # frame over the limit
        rpc.pack({"not": "a list"}),
        rpc.pack([1, "exists", {"keys": "notalist"}]),
        rpc.pack([1, "exists", {"keys": [1, 2, 3]}]),
        rpc.pack([1, "put_start", {"client_id": "x", "items": [["k", -5, 0]], "replicas": 1}]),
        rpc.pack([1, "put_start", {"client_id": "x", "items": "junk", "replicas": 1}]),
        rpc.pack([1, "mount_segment", {"client_id": 7}]),
        rpc.pack([1, "no_such_method", {}]),
        rpc.pack([1, "exists", {"keys": ["x" * 5000]}]),
        rpc.pack([1, "exists", {"keys": ["a"], "surprise": 1}]),
        rpc.pack([1, "hello", {"version": "2"}]),
        rpc.pack([-1, "hello", {"version": m.PROTOCOL_VERSION}]),
    ],
)
def test_malformed_rpc_gets_an_error_and_master_stays_up(shared_cluster: Cluster, payload: bytes) -> None:
    reply = _raw_call(shared_cluster.master, payload)
    assert reply is None or (isinstance(reply, list) and reply[1] != 0)
    hello = rpc.pack([7, "hello", {"version": m.PROTOCOL_VERSION}])
    assert _raw_call(shared_cluster.master, hello) == [7, 0, "", [m.PROTOCOL_VERSION, 0]]  # epoch 0: no HA


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (rpc.pack([1, "hello", {"version": 1}]), "client speaks RPC protocol 1"),
        (rpc.pack([1, "ping", {}]), "the client is older"),  # how clients before the typed protocol opened
    ],
)
def test_a_client_of_another_protocol_version_gets_a_clear_error(
    shared_cluster: Cluster, payload: bytes, says: str
) -> None:
    reply = _raw_call(shared_cluster.master, payload)
    assert isinstance(reply, list) and reply[1] != 0 and says in reply[2]


def test_metrics_and_health(shared_cluster: Cluster) -> None:
    with Store.connect(shared_cluster.master) as store:
        store.put("m", b"1")
        store.get("m")
        store.get("missing")
    metrics = urllib.request.urlopen(f"http://{shared_cluster.http}/metrics", timeout=5).read().decode()
    assert (
        "kvstore_objects" in metrics and "kvstore_hits_total" in metrics and "kvstore_rpc_seconds" in metrics
    )
    health = json.loads(urllib.request.urlopen(f"http://{shared_cluster.http}/health", timeout=5).read())
    assert health["status"] == "ok" and health["segments"] == 2
    # How long the loop was held: its longest turn, and each housekeeping and scrape task's longest run.
    metrics = urllib.request.urlopen(f"http://{shared_cluster.http}/metrics", timeout=5).read().decode()
    turn = [line for line in metrics.splitlines() if line.startswith("kvstore_master_loop_turn_max_seconds ")]
    assert turn and 0 < float(turn[0].split()[1]) < 60
    for task in ("expire", "replication_plan", "scrape_metrics", "scrape_health"):
        assert f'kvstore_master_task_max_seconds{{task="{task}"}}' in metrics
    with Store.connect(shared_cluster.master) as store:
        store.stats()
        stats = store.stats()["master"]  # (a Stats request is timed once it is answered: the second sees it)
    assert stats["loop_turn_max_ms"] > 0 and stats["expire_max_ms"] >= 0 and "scrape_stats_max_ms" in stats


def test_metrics_show_each_clients_transfer_paths_per_nic(shared_cluster: Cluster) -> None:
    """A client's heartbeats carry its engine's paths summed per local NIC (loopback over TCP: one path
    per node, where the kernel routes: "default"); /metrics shows their bytes, slices and states."""
    with Store.connect(shared_cluster.master, transport="tcp") as store:
        wait_for_mounts(store, 2)
        value = np.arange(1 << 20, dtype=np.uint8)
        for i in range(8):
            store.put(f"path{i}", value)
            assert store.get(f"path{i}") is not MISS
        labels = f'{{client="{store.client_id}",nic="default"}}'
        deadline = time.monotonic() + 10
        while True:
            metrics = (
                urllib.request.urlopen(f"http://{shared_cluster.http}/metrics", timeout=5).read().decode()
            )
            found = {
                line.split()[0]: float(line.split()[1]) for line in metrics.splitlines() if labels in line
            }
            if found.get(f"kvstore_path_bytes_total{labels}", 0) >= 16 << 20:  # 8 puts and 8 gets of 1 MiB
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
        assert found[f"kvstore_path_slices_total{labels}"] >= 16
        assert found[f"kvstore_paths_up{labels}"] >= 1 and found[f"kvstore_paths_down{labels}"] == 0
        assert found[f"kvstore_path_failures_total{labels}"] == 0


def test_raw_pointer_buffers(shared_cluster: Cluster) -> None:
    with Store.connect(shared_cluster.master) as store:
        memory = np.zeros(1 << 20, np.uint8)
        raw = (memory.ctypes.data, memory.nbytes)
        from kvstore import InvalidArgumentError

        with pytest.raises(InvalidArgumentError):
            store.put_from("raw", raw)  # unregistered raw memory is refused, not guessed at
        store.register_buffer(raw)
        memory[:] = 9
        store.put_from("raw", raw)
        memory[:] = 0
        assert store.get_into("raw", raw) == 1 << 20 and (memory == 9).all()
        store.unregister_buffer(raw)


def test_raw_pieces_across_registrations(shared_cluster: Cluster) -> None:
    """Values spread over raw (address, size) pieces of several raw registrations (an engine's layers),
    with odd sizes, short values, and pieces the batch path does not take."""
    from kvstore import InvalidArgumentError

    rng = np.random.default_rng(5)
    a, b = (rng.integers(0, 256, 1 << 20, dtype=np.uint8) for _ in range(2))
    out_a, out_b = np.zeros(1 << 20, np.uint8), np.zeros(1 << 20, np.uint8)
    registered_numpy = np.zeros(1 << 16, np.uint8)  # registered as an array, not as raw memory

    def at(array: np.ndarray, offset: int, size: int) -> tuple[int, int]:
        return (array.ctypes.data + offset, size)

    sizes = [4097, 65536, 3, 2048, 100_000]
    with Store.connect(shared_cluster.master) as store:
        for array in (a, b, out_a, out_b):
            store.register_buffer((array.ctypes.data, array.nbytes))
        store.register_buffer(registered_numpy)
        sources = [
            [at(a if j % 2 else b, 7 + 200_000 * j, n) for j, n in enumerate(sizes[: i + 1])]
            for i in range(5)
        ]
        targets = [
            [at(out_a if j % 2 else out_b, 11 + 200_000 * j, n) for j, n in enumerate(sizes[: i + 1])]
            for i in range(5)
        ]
        keys = [f"pieces/{i}" for i in range(5)]
        assert store.batch_put_from_multi_buffers(keys, sources) == [0] * 5
        expected = [
            b"".join(bytes((a if j % 2 else b)[7 + 200_000 * j :][:n]) for j, n in enumerate(sizes[: i + 1]))
            for i in range(5)
        ]
        assert store.batch_get(keys) == expected
        assert store.batch_get_into_multi_buffers(keys, targets) == [len(e) for e in expected]
        for j, n in enumerate(sizes):
            src, dst = (a, out_a) if j % 2 else (b, out_b)
            assert np.array_equal(dst[11 + 200_000 * j :][:n], src[7 + 200_000 * j :][:n])
        # A value shorter than its buffers fills the first pieces only.
        out_a[:] = 0
        short = [at(out_a, 0, 4096), at(out_a, 10_000, 4096), at(out_a, 20_000, 4096)]
        too_small = -InvalidArgumentError.code
        assert store.batch_get_into_multi_buffers(["pieces/1"], [short]) == [too_small]
        assert store.batch_get_into_multi_buffers(["pieces/0"], [short]) == [4097]
        assert bytes(out_a[:4096]) + bytes(out_a[10_000:10_001]) == expected[0]
        assert not out_a[10_001 : 10_000 + 4096].any() and not out_a[20_000:24_096].any()
        # Raw pieces inside an array registration take the general path; pieces outside any fail.
        inside = [at(registered_numpy, 0, 2048), at(out_b, 0, 2049)]
        assert store.batch_put_from_multi_buffers(["mixed"], [inside]) == [0]
        outside = [at(out_b, (1 << 20) - 100, 200)]  # runs past the registration's end
        with pytest.raises(InvalidArgumentError):
            store.batch_put_from_multi_buffers(["outside"], [outside])
        # The same pieces as flat arrays (batch_*_pieces, as a paged KV cache gives them): same bytes.
        flat = [piece for parts in sources for piece in parts]
        addrs, lengths = np.array(flat, dtype=np.uint64).T
        counts = [len(parts) for parts in sources]
        arrays = [f"arrays/{i}" for i in range(5)]
        assert store.batch_put_from_pieces(arrays, addrs, lengths, counts) == [0] * 5
        assert store.batch_get(arrays) == expected
        out_a[:] = 0
        out_b[:] = 0
        back = np.array([piece for parts in targets for piece in parts], dtype=np.uint64).T
        assert store.batch_get_into_pieces(arrays, back[0], back[1], counts) == [len(e) for e in expected]
        for j, n in enumerate(sizes):
            src, dst = (a, out_a) if j % 2 else (b, out_b)
            assert np.array_equal(dst[11 + 200_000 * j :][:n], src[7 + 200_000 * j :][:n])
        for bad in ([1, 1, 1, 1], [0, 3, 3, 4, 5], [2, 3, 3, 4, 4]):  # counts: too few, empty, wrong sum
            with pytest.raises(InvalidArgumentError):
                store.batch_get_into_pieces(arrays[: len(bad)], back[0], back[1], bad)
        assert store.batch_get_into_pieces([], [], [], []) == []
        with pytest.raises(InvalidArgumentError):  # a piece outside every registration
            store.batch_put_from_pieces(["outside"], [out_b.ctypes.data + (1 << 20) - 100], [200], [1])


def test_python_and_cpp_checksums_agree(shared_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Values written with one hashing path read back verified with the other (a mismatch is a miss)."""
    from kvstore.client import buffers

    values = [
        np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8) for i, n in enumerate([2, 240, 70_000])
    ]
    with Store.connect(shared_cluster.master) as store:
        for writer_in_python in (False, True):
            keys = [f"agree/{writer_in_python}/{i}" for i in range(3)]
            with monkeypatch.context() as patch:
                patch.setattr(buffers.checksum, "available", lambda w=writer_in_python: not w)
                assert (
                    store.batch_put_from_multi_buffers(
                        keys, [[v[: len(v) // 2], v[len(v) // 2 :]] for v in values]
                    )
                    == [0] * 3
                )
            with monkeypatch.context() as patch:
                patch.setattr(buffers.checksum, "available", lambda w=writer_in_python: w)
                assert store.batch_get(keys) == [v.tobytes() for v in values]
        assert store.stats_local.checksum_mismatches == 0


def test_node_killed_during_reads_never_yields_wrong_bytes(cluster: Cluster) -> None:
    with Store.connect(cluster.master) as store:
        keys = [f"live{i}" for i in range(64)]
        values = [value(32 << 10, 1000 + i) for i in range(64)]
        assert store.batch_put_from(keys, values) == [0] * 64
        out = np.zeros((64, 32 << 10), np.uint8)
        store.register_buffer(out)
        stop = threading.Event()
        problems: list[str] = []
        rounds = [0]

        def reader() -> None:
            while not stop.is_set():
                results = store.batch_get_into(keys, list(out))
                rounds[0] += 1
                for i, r in enumerate(results):
                    if r == MISS:
                        continue
                    if r != 32 << 10 or out[i].tobytes() != values[i]:
                        problems.append(f"{keys[i]}: result {r}, bytes differ")

        thread = threading.Thread(target=reader)
        thread.start()
        while rounds[0] < 3:
            time.sleep(0.01)
        cluster.nodes[0][0].send_signal(signal.SIGKILL)
        cluster.nodes[0][0].wait()
        time.sleep(0.5)
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive() and not problems and rounds[0] > 3


def test_blocks_and_match_prefix(shared_cluster: Cluster) -> None:
    from kvstore.blocks import BlockHasher

    hasher = BlockHasher(4, "model-a")
    tokens = np.arange(4 * 6)
    keys = hasher.keys(tokens)
    blocks = [np.full(1000, i, np.uint8) for i in range(6)]
    with Store.connect(shared_cluster.master) as store:
        assert store.match_prefix(keys).matched == 0
        assert store.put_blocks(keys[:4], blocks[:4]) == [0] * 4
        store.put_blocks(keys[5:], blocks[5:])  # a block whose prefix is missing
        match = store.match_prefix(keys)
        assert match.matched == 4 and len(match.replicas) == 4
        assert max(match.per_node.values()) <= 4 and set(match.per_node) <= {
            n for _, n in shared_cluster.nodes
        }
        assert all(len(r) == 1 for r in match.replicas)
        out = [np.zeros(1000, np.uint8) for _ in range(6)]
        assert store.get_blocks(keys, out) == 4
        assert all((out[i] == i).all() for i in range(4)) and not out[4].any() and not out[5].any()
        other = BlockHasher(4, "model-a").keys(np.r_[np.arange(8), np.arange(100, 116)])
        assert store.match_prefix(other).matched == 2  # shared first two blocks


def test_clients_rejoin_a_restarted_master() -> None:
    """After a restart on the same port the clients register and mount again by themselves; the node
    names what it holds, so old keys are back; new puts work."""
    from kvstore.procs import kvstore_process, stop_process

    options = ["--client-ttl", "2", "--heartbeat-interval", "0.2"]
    with kvstore_process(["master", "--port", "0", *options]) as (master, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "16MiB"]
        with kvstore_process(node), Store.connect(address, rpc_timeout=2.0) as store:
            store.put("before", b"1")
            stop_process(master)
            port = address.rsplit(":", 1)[1]
            with kvstore_process(["master", "--port", port, *options]):
                wait_for_mounts(store, 1)  # the node mounted again and named back what it held
                assert store.get("before") == b"1"
                store.put("after", b"2")
                assert store.get("after") == b"2"


def test_a_join_again_that_fails_half_way_is_made_again_from_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a master restart the node side registers again but its segment's mount fails (here: once,
    as a mount whose reply is lost would): it must not stay registered with nothing mounted, serving
    nothing, with no one to say so. The next call finds the master does not know it and joins again."""
    from kvstore.errors import MasterUnavailableError
    from kvstore.node.memory_tier import MemoryTier

    mount, calls = MemoryTier.mount, []

    def second_mount_fails(tier: MemoryTier) -> None:
        calls.append(tier)
        if len(calls) == 2:  # the first mount after the restart
            raise MasterUnavailableError("the mount's reply was lost")
        mount(tier)

    monkeypatch.setattr(MemoryTier, "mount", second_mount_fails)
    with _master_restarted(heartbeat_interval="0.5") as store:  # (a failed join is retried so soon)
        try:  # this call or the node's work channel joins again first and meets the failure
            store.put("after", b"2")
        except MasterUnavailableError as exc:
            assert "reply was lost" in str(exc)
            store.put("after", b"2")  # not "no segment": it joins again from the start
        assert store.get("after") == b"2"
        assert store.stats()["master"]["segments"] == 1
        assert len(calls) == 3


@contextlib.contextmanager
def _master_restarted(heartbeat_interval: str) -> Iterator[Store]:
    """A store with a segment of its own that put a key, and its master restarted on the same port
    (client TTL 60 s: the restart, not a timeout, makes the master forget the store)."""
    from kvstore.procs import kvstore_process, stop_process

    options = ["--client-ttl", "60", "--heartbeat-interval", heartbeat_interval]
    with kvstore_process(["master", "--port", "0", *options]) as (master, ready):
        address = ready.split()[0]
        with Store.connect(address, segment_size="8MiB", rpc_timeout=2.0) as store:
            store.put("before", b"1")
            stop_process(master)
            with kvstore_process(["master", "--port", address.rsplit(":", 1)[1], *options]):
                yield store


def test_a_put_right_after_a_master_restart_rejoins_without_waiting_for_a_heartbeat() -> None:
    """The first put after a restart finds the master does not know the client: it registers (and mounts
    its own segment) again at once and retries, instead of failing until the next heartbeat."""
    with _master_restarted(heartbeat_interval="30") as store:  # no heartbeat during the test
        store.put("after", b"2")  # rejoins: registers, remounts its segment, retries
        assert store.get("after") == b"2"
        assert store.stats()["master"]["segments"] == 1
