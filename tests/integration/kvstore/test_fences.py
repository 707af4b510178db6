"""Fenced allocations with real processes: no stale read through a cached location, no object lost to a
late writer, no writer starved by readers' leases (issue: keep the promise under faults and load)."""

from __future__ import annotations

import threading
import time

import numpy as np

from kvstore import Store
from kvstore.errors import TooManyPutsError
from kvstore.procs import kvstore_process
from kvstore.rpc import messages as m
from tests.helpers.raw_peer import ERROR, PROOF_ACK, READ, READ_DATA, WRITE, RawPeer, open_session
from tests.integration.kvstore.conftest import wait_for_mounts
from transfer_engine import Op, RequestState, StaleLocationError, _tools
from transfer_engine.errors import CODE_NAMES


def _master(*options: str) -> list[str]:
    return ["master", "--port", "0", "--heartbeat-interval", "0.3", "--client-ttl", "3", *options]


def test_a_cached_location_never_serves_a_removed_value() -> None:
    """A reads k (its location is cached for half the lease); B force-removes k and puts new bytes.
    A's next get must see the new value. Was: the old bytes, 20 times out of 20."""
    with kvstore_process(_master("--lease-ttl", "10")) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node), Store.connect(address) as a, Store.connect(address) as b:
            stale = 0
            for i in range(20):
                key = f"k/{i}"
                old, new = bytes([i]) * 65536, bytes([i + 100]) * 131072
                b.put(key, old)
                b.put(f"pad/{i}", b"p" * 4096)  # the hole k leaves is too small for the new value
                assert a.get(key) == old  # A now holds k's location in its lease cache
                b.remove(key, force=True)
                assert not b.exists(key)
                b.put(key, new)  # elsewhere: k's old bytes are still in the segment
                got = a.get(key)
                stale += got == old
                assert got == new
            assert stale == 0
            assert a.stats_local.stale_locations >= 20  # every cached location was refused by the node


def test_a_late_writer_cannot_destroy_another_object() -> None:
    """A put is reclaimed (its writer stalled past the put timeout); its space goes to another object;
    then the stalled writer's bytes arrive. Was: the victim read as a miss while exists said True (5/5)."""
    size = 8 << 20
    with kvstore_process(_master("--put-timeout", "0.5")) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "8MiB"]  # one object fills it
        with kvstore_process(node), Store.connect(address) as late, Store.connect(address) as other:
            stale_bytes = late.engine.allocate(size, export=False)
            assert stale_bytes.array is not None
            stale_bytes.array[:] = 0xEE
            for i in range(5):
                # The late writer got its placement, then stalled (what SIGSTOP or swap does to it).
                start = m.PutStart(
                    client_id=late.client_id, items=[m.PutItem(f"late/{i}", size, 1)], replicas=1
                )
                (placed,) = late.master.call(start)
                engine, region, offset, slot, gen = placed.value[0]
                victim = np.full(size, i, np.uint8)
                deadline = time.monotonic() + 10
                while True:  # reclaimed after the put timeout; its space is free once the node fenced it
                    if other.batch_put_from([f"victim/{i}"], [victim]) == [0]:
                        break
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                peer = late.session.peer(engine)
                assert peer is not None
                state, code = late.engine.transfer_one(
                    Op.WRITE, stale_bytes.addr, peer, region, offset, size, fence=(slot, gen)
                )
                assert (state, code) == (RequestState.FAILED, StaleLocationError.code)  # refused by the node
                assert other.exists(f"victim/{i}")
                assert other.get(f"victim/{i}") == victim.tobytes()
                other.remove(f"victim/{i}", force=True)
            assert other.stats()["master"]["reclaimed_puts"] == 5


def test_readers_leases_do_not_starve_a_writer_at_capacity() -> None:
    """A 64 MiB node, one writer of 1-4 MiB values, two readers of recent keys under 5 s leases. Was: 86%
    of puts failed with NoSpace (every object leased). Now a put may evict a leased object (fenced: its
    readers miss, never read other bytes)."""
    rng = np.random.default_rng(7)
    with kvstore_process(_master("--lease-ttl", "5")) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node), Store.connect(address) as writer:
            written: list[tuple[str, int]] = []
            stop = threading.Event()
            wrong = [0]
            reads = [0]

            def read_recent() -> None:
                with Store.connect(address) as reader:
                    while not stop.is_set():
                        for key, fill in written[-8:]:
                            got = reader.get(key)
                            reads[0] += 1
                            if got is not None and got != bytes([fill]) * len(got):
                                wrong[0] += 1

            readers = [threading.Thread(target=read_recent) for _ in range(2)]
            for t in readers:
                t.start()
            failed = puts = 0
            try:
                deadline = time.monotonic() + 6
                while time.monotonic() < deadline:
                    size = int(rng.integers(1, 5)) << 20
                    fill = puts % 251
                    key = f"w/{puts}"
                    ok = writer.batch_put_from([key], [np.full(size, fill, np.uint8)]) == [0]
                    failed += not ok
                    puts += 1
                    if ok:
                        written.append((key, fill))
            finally:
                stop.set()
                for t in readers:
                    t.join(timeout=30)
            assert puts >= 50 and reads[0] >= 50
            assert failed / puts < 0.05, f"{failed} of {puts} puts failed"
            assert wrong[0] == 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_cached_location_from_before_a_master_restart_is_refused() -> None:
    """The master restarts and takes the key back from the node (the same allocation: the cached location
    still reads the right bytes); it is removed and put again with other bytes. A client that cached the
    old location must not read the old bytes: the removal fenced the restored allocation off."""
    port = _free_port()
    master = _master("--lease-ttl", "30")
    master[master.index("0", master.index("--port"))] = str(port)
    address = f"127.0.0.1:{port}"
    with kvstore_process(master) as (first, _):
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node), Store.connect(address) as a:
            a.put("front", bytes(32 << 20))  # k lands behind it: the new master's first puts go elsewhere
            a.put("k", b"o" * 65536)
            assert a.get("k") == b"o" * 65536  # cached for half the 30 s lease
            first.kill()
            first.wait()
            with kvstore_process(master), Store.connect(address) as b:
                wait_for_mounts(b, 1)  # the node rejoins the new master and names back what it holds
                assert a.get("k") == b"o" * 65536 and b.get("k") == b"o" * 65536
                b.remove("k", force=True)
                b.put("k", b"n" * 131072)
                assert a.get("k") == b"n" * 131072


def test_removing_100k_objects_at_once_gives_all_space_back() -> None:
    """One remove_all of 100,000 objects queues 100,000 kills for one node. Was: the node acknowledged
    them in one AwaitFences the master refused (over 16,384 ids), retried forever, and no slot came back:
    every later put evicted everything looking for one."""
    count, size = 100_000, 1024
    with kvstore_process(_master("--lease-ttl", "1")) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "256MiB"]  # 131,072 fence slots
        with kvstore_process(node), Store.connect(address) as client:
            keys = [f"many/{i}" for i in range(count)]
            value = np.full(size, 7, np.uint8)
            put_all(client, keys, value)
            assert client.remove_all(force=True) == count
            deadline = time.monotonic() + 30
            while True:  # every kill acknowledged: the slots and the space are back
                stats = client.stats()["master"]
                if stats["fence_kills_outstanding"] == 0 and stats["used"] == 0:
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.2)
            # The space is usable again: as many objects fit as before, with nothing evicted for them.
            put_all(client, keys, value)
            assert client.stats()["master"]["evictions"] == 0
            assert client.get(keys[-1]) == value.tobytes()


def put_all(client: Store, keys: list[str], value: np.ndarray, batch: int = 8192) -> None:
    """Puts `value` under every key, in batches its staging area holds."""
    for start in range(0, len(keys), batch):
        chunk = keys[start : start + batch]
        assert client.batch_put_from(chunk, [value] * len(chunk)) == [0] * len(chunk)


def test_one_client_cannot_take_every_slot_with_puts_it_never_ends() -> None:
    """A client starts 17 requests of 4,096 one-byte puts and never ends them. Was: every fence slot taken,
    0% of other clients' puts succeeded and everyone's objects were evicted looking for a slot. Now its
    puts past its limit fail with TooManyPutsError, evict nothing, and the others' puts go on."""
    with kvstore_process(_master("--put-timeout", "60")) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "64MiB"]  # 32,768 fence slots
        with kvstore_process(node), Store.connect(address) as hog, Store.connect(address) as other:
            kept = [f"kept/{i}" for i in range(1000)]
            put_all(other, kept, np.full(4096, 3, np.uint8))
            codes = []
            for r in range(17):
                items = [m.PutItem(f"hog/{r}/{i}", 1, 1) for i in range(4096)]
                start = m.PutStart(client_id=hog.client_id, items=items, replicas=1)
                codes += [res.code for res in hog.master.call(start)]
            assert codes.count(0) == 16384  # client_put_objects
            assert set(codes) == {0, TooManyPutsError.code}
            fresh = [f"fresh/{i}" for i in range(8000)]
            put_all(other, fresh, np.full(1024, 5, np.uint8))  # every one of them succeeds
            stats = other.stats()["master"]
            assert stats["evictions"] == 0
            assert all(other.batch_exists(kept)) and other.get(kept[0]) == bytes([3]) * 4096


def test_a_member_forging_fences_on_the_nodes_tcp_port_reads_and_overwrites_nothing() -> None:
    """Issue 39, item 5: a member (it holds the secret) speaks the node's tcp port by hand. Was: a forged
    fence (slot 0, generation 2^63) read any object's bytes and overwrote them (acknowledged; the victim's
    object lost). Now the node admits only the allocation it was told its slot holds: the same generation,
    inside its range, and written once, so even the victim's own fence, which every reader learns, writes
    nothing. Every forged generation is refused (0, +-1, 2^63, 2^64 - 1, other slots); the victim reads
    back its bytes."""
    with kvstore_process(_master()) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "64MiB"]
        with kvstore_process(node), Store.connect(address) as victim, Store.connect(address) as attacker:
            value = bytes(range(256)) * 256
            victim.put("before", b"b" * 8192)
            victim.put("victim", value)
            victim.put("after", b"a" * 8192)
            (found,) = attacker.master.call(m.GetReplicas(keys=["victim"]))
            assert found is not None
            where = found.locations[0]
            peer = attacker.engine.open_peer(where.engine, "tcp")
            tcp = attacker.engine._core_engine().peer_info(peer.handle)["transports"]["tcp"]["address"]
            session = open_session(where.engine)
            key = session["keys"][where.region_id]
            size = len(value)
            slot, gen = where.slot, where.gen
            forged = [(0, 1 << 63), (slot, 1 << 63), (slot, gen + 1), (slot, gen - 1), (slot, (1 << 64) - 1)]
            forged += [(slot + 1, gen), ((1 << 32) - 1, gen)]
            with RawPeer(str(tcp), timeout=15) as raw:
                assert raw.authenticate(session)["opcode"] == PROOF_ACK
                request = iter(range(1, 1000))

                def ask(op: int, fence: tuple[int, int], offset: int, length: int) -> dict:
                    header = _tools.encode_frame_header(
                        op, 0, next(request), where.region_id, key, offset, length, *fence
                    )
                    raw.send(header + (b"\xee" * length if op == WRITE else b""))
                    reply = raw.recv_header()
                    if reply["opcode"] == READ_DATA:
                        reply["data"] = raw.recv_exact(reply["length"])
                    return reply

                def refused(reply: dict, code: str = "STALE") -> bool:
                    return reply["opcode"] == ERROR and CODE_NAMES[reply["status"]] == code

                for fence in forged:
                    assert refused(ask(READ, fence, where.offset, size)), fence
                    assert refused(ask(WRITE, fence, where.offset, size)), fence
                assert refused(ask(WRITE, (slot, 0), where.offset, size), "PERMISSION_DENIED")
                # The victim's own fence: it reads its object, nothing outside it, and writes nothing.
                assert ask(READ, (slot, gen), where.offset, size)["data"] == value
                assert refused(ask(READ, (slot, gen), where.offset - 4096, 8192))
                assert refused(ask(READ, (slot, gen), where.offset + size - 1, 2))
                assert refused(ask(WRITE, (slot, gen), where.offset, size))
                assert refused(ask(WRITE, (slot, gen), where.offset, 1))
            assert victim.get("victim") == value
            assert victim.get("before") == b"b" * 8192 and victim.get("after") == b"a" * 8192
