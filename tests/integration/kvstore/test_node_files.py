"""A node's files and the local users of its host, with real processes (issue 39, items 2, 4, 10, 11):
two nodes on one disk file, a full file system under the disk index, a segment another user planted or
whose directory they took first, and the master's KV events socket. The other user is real (uid 65534,
as root); tests that need it skip without root."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import numpy as np
import pytest
import xxhash

from kvstore import Store
from kvstore.config import MasterConfig, NodeConfig
from kvstore.errors import KVStoreError
from kvstore.master import Master
from kvstore.master.wire.server import EmbeddedMaster
from kvstore.node import node_key
from kvstore.node.identity import NodeIdentity, lock_directory
from kvstore.procs import kvstore_process
from tests.conftest import tiny_tmpfs
from tests.helpers.kv_event_publisher import free_port
from tests.helpers.other_user import OTHER_UID, need_root, run_as_other
from tests.integration.kvstore.conftest import master_for_a_disk_node

SEGMENT = 16 << 20
VALUE = 256 << 10


@contextlib.contextmanager
def master(**settings: object) -> Iterator[EmbeddedMaster]:
    config = MasterConfig.load(port=0, heartbeat_interval=0.3, busy_poll_us=0, **settings)
    embedded = Master.start_in_thread(config)
    try:
        yield embedded
    finally:
        embedded.stop()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory like /dev/shm that the other user can reach and create in (sticky, 1777)."""
    where = Path(
        tempfile.mkdtemp(prefix="kvstore-test-shared-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    os.chmod(where, 0o1777)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def values(n: int) -> list[np.ndarray]:
    return [np.random.default_rng(i).integers(0, 256, VALUE, dtype=np.uint8) for i in range(n)]


def mapped_files(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split(maxsplit=5)[5].strip() for line in f if len(line.split(maxsplit=5)) == 6}


# -- item 2: one process per data file --------------------------------------------------------------------
def test_a_second_node_on_the_same_disk_file_is_refused_naming_the_first(tmp_path: Path) -> None:
    """Was: the second `kvstore node` of the same command took identity slot 1 and wrote into the same
    file (375 of 400 acknowledged objects lost, every tier shown ok)."""
    disk = tmp_path / "tier"
    with master() as m:
        node = ["node", "--master", m.address, "--segment-size", "16MiB", "--disk", str(disk)]
        node += ["--disk-size", "64MiB", "--disk-backend", "threads"]
        with kvstore_process(node) as (first, _), Store.connect(m.address, rpc_busy_poll_us=0) as store:
            data = values(8)
            keys = [f"first/{i}" for i in range(8)]
            assert store.batch_put_from(keys, data) == [0] * 8
            began = time.monotonic()
            with (
                pytest.raises(KVStoreError, match=f"in use by the process {first.pid}"),
                kvstore_process(node),
            ):
                pass
            assert time.monotonic() - began < 30  # refused at start, not after joining
            assert store.stats()["master"]["segments"] == 1  # the second never joined
            assert store.batch_get(keys) == [v.tobytes() for v in data]


def test_a_node_with_a_disk_is_the_same_identity_after_a_reboot(tmp_path: Path) -> None:
    """Review of issue 39, item 9: the node key lived in tmpfs only, so after a reboot (or a container
    made anew) within client_ttl the node came back as a new identity: it could not supersede its old
    registration, its disk records were refused as conflicts and then dropped with the old registration:
    unreadable though still on disk. The key now lives beside the disk file (0600). The reboot here: the
    node SIGKILLed and everything it kept in shared memory (key, lock, segment, catalog) removed."""
    disk = tmp_path / "tier"
    data = values(48)
    keys = [f"reboot/{i}" for i in range(len(data))]
    with master_for_a_disk_node(disk) as (m, node):
        identity = NodeIdentity(NodeConfig.load(segment_size=SEGMENT, disk=str(disk)), m.address)
        identity.release()
        state = m.master.state
        with Store.connect(m.address, rpc_busy_poll_us=0) as store:
            with kvstore_process(node) as (proc, _):
                for i in range(0, len(keys), 8):
                    assert store.batch_put_from(keys[i : i + 8], data[i : i + 8]) == [0] * 8
                    time.sleep(0.05)
                on_disk = {k for k in keys if k in state.objects and state.objects[k].disk is not None}
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            assert len(on_disk) >= 16
            key_file = Path(node_key.path_of(identity.stem, str(disk)))
            assert key_file.parent == disk.parent and stat.S_IMODE(key_file.stat().st_mode) == 0o600
            tmpfs = [Path(lock_directory()) / f"kvstore-node-{identity.stem}.{x}" for x in ("key", "lock")]
            memory = Path("/dev/shm") / f"kvstore-{os.geteuid()}" / f"kvstore-node-{identity.stem}"
            for path in [*tmpfs, memory.with_suffix(".mem"), memory.with_suffix(".held")]:
                path.unlink(missing_ok=True)  # the reboot
            with kvstore_process(node):
                assert store.stats()["master"]["superseded_clients"] == 1  # was 0: a new identity
                time.sleep(state.config.client_ttl + 1)  # the old registration would have expired by now
                kept = sorted(on_disk)
                got = [g for i in range(0, len(kept), 16) for g in store.batch_get(kept[i : i + 16])]
                expected = [data[keys.index(k)].tobytes() for k in kept]
                assert all(g is None or g == e for g, e in zip(got, expected, strict=True))  # never wrong
                assert sum(g == e for g, e in zip(got, expected, strict=True)) >= 0.99 * len(kept)


# -- item 4: degraded clears only when an append works ----------------------------------------------------
def test_a_full_file_system_keeps_the_disk_degraded_without_flapping(tmp_path: Path) -> None:
    """Was: the recovery check rewrote the (empty) index, which needs no new space, so the disk came back
    every second and failed its next demotions again (5 changes in 4 s, 30 demotions failed). Now it stays
    degraded while the file system is full and clears once, when there is room."""
    with tiny_tmpfs(tmp_path / "small", "66m") as fs, master(demote_watermark=0.5) as m:
        changes: list[tuple[float, str]] = []
        disk_state = m.master.state.disk
        set_degraded = disk_state.set_degraded

        def noted(client_id: str, reason: str) -> None:
            changes.append((time.monotonic(), reason))
            set_degraded(client_id, reason)

        disk_state.set_degraded = noted  # type: ignore[method-assign]  (the real one, and a note of it)
        node = ["node", "--master", m.address, "--segment-size", "16MiB", "--disk", str(fs / "tier")]
        node += ["--disk-size", "64MiB", "--disk-backend", "threads"]
        with kvstore_process(node), Store.connect(m.address, rpc_busy_poll_us=0) as store:
            filler = fs / "filler"
            with contextlib.suppress(OSError), open(filler, "wb") as f:  # the index has no room left (the
                # close flushes what the last write buffered: it fails too)
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            data = values(16)
            deadline = time.monotonic() + 30
            i = 0
            while not store.stats()["master"]["disks_degraded"] and time.monotonic() < deadline:
                put_batch(store, f"full/{i}", data)
                i += 1
            assert store.stats()["master"]["disks_degraded"] == 1
            watched = time.monotonic()
            while time.monotonic() - watched < 5:  # demand for demotions the whole time
                put_batch(store, f"full/{i}", data)
                i += 1
                time.sleep(0.1)
            cleared = [t for t, reason in changes if t >= watched and not reason]
            assert cleared == [], changes  # was 2-4 in 5 s
            assert store.stats()["master"]["disks_degraded"] == 1
            filler.unlink()  # room again
            deadline = time.monotonic() + 15
            while store.stats()["master"]["disks_degraded"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.stats()["master"]["disks_degraded"] == 0
            deadline = time.monotonic() + 15
            while store.stats()["master"]["demotions"] == 0 and time.monotonic() < deadline:
                put_batch(store, f"room/{i}", data)
                i += 1
                time.sleep(0.1)
            assert store.stats()["master"]["demotions"] > 0


def put_batch(store: Store, prefix: str, data: list[np.ndarray]) -> None:
    keys = [f"{prefix}/{j}" for j in range(4)]
    assert store.batch_put_from(keys, data[:4]) == [0] * 4


# -- item 10: a segment another user planted --------------------------------------------------------------
def _stem(master_address: str) -> str:
    """The identity a node with these settings takes (slot 0), as any local user can work it out."""
    identity = NodeIdentity(NodeConfig.load(segment_size=SEGMENT), master_address)
    identity.release()
    return identity.stem


def _plant(directory: Path, stem: str) -> tuple[Path, Path]:
    """As the other user: a segment file of the node's size open to all, and a catalog (the format before
    tags) naming an object of theirs in it, where the node used to look for them."""
    memory, catalog = directory / f"kvstore-node-{stem}.mem", directory / f"kvstore-node-{stem}.held"
    forged = b"forged object".ljust(4096, b"!")
    record = (0, 0, 1, "victim/0", len(forged), xxhash.xxh3_64_intdigest(forged), False, 1)

    def plant() -> None:
        with open(memory, "wb") as f:
            f.write(forged)
            f.truncate(SEGMENT)
        os.chmod(memory, 0o666)
        with open(catalog, "wb") as f:
            f.write(msgpack.packb([0, [record]]))
        os.chmod(catalog, 0o666)

    assert run_as_other(plant) == 0
    return memory, catalog


def test_a_segment_planted_by_another_user_is_never_mapped_nor_its_objects_served(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: the names were predictable and opened without O_EXCL or an owner check, so a user who made
    kvstore-node-<id>-0.mem (0666) and a catalog before the node started kept read/write access to the
    live segment and had forged objects served as valid."""
    need_root()
    monkeypatch.setenv("KVSTORE_NODE_MEMORY_DIR", str(shared_dir))
    with master() as m:
        stem = _stem(m.address)
        memory, _ = _plant(shared_dir, stem)
        private = shared_dir / f"kvstore-{os.geteuid()}"
        _plant(private.parent, stem)  # (the same names, where the node used to look)
        node = ["node", "--master", m.address, "--segment-size", "16MiB"]
        with kvstore_process(node) as (proc, ready), Store.connect(m.address, rpc_busy_poll_us=0) as store:
            assert "kept=0" in ready.split()  # nothing of theirs adopted
            assert store.get("victim/0") is None
            data = values(8)
            keys = [f"mine/{i}" for i in range(8)]
            assert store.batch_put_from(keys, data) == [0] * 8
            maps = mapped_files(proc.pid)
            assert str(memory) not in maps
            own = private / f"kvstore-node-{stem}.mem"
            assert str(own) in maps
            info = os.stat(own)
            assert (info.st_uid, stat.S_IMODE(info.st_mode), stat.S_IMODE(os.stat(private).st_mode)) == (
                os.geteuid(),
                0o600,
                0o700,
            )
            assert run_as_other(lambda: os.close(os.open(own, os.O_RDONLY))) == 1  # cannot even look
            theirs = memory.read_bytes()
            assert not any(v.tobytes()[:64] in theirs for v in data)  # none of our bytes in theirs


def test_a_private_directory_another_user_took_first_leaves_the_segment_anonymous(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory's name is predictable too: taken first by another user (with a planted segment in
    it), the node does not use it at all; it serves from anonymous memory (said in its log)."""
    need_root()
    monkeypatch.setenv("KVSTORE_NODE_MEMORY_DIR", str(shared_dir))
    squat = shared_dir / f"kvstore-{os.geteuid()}"
    assert run_as_other(lambda: os.mkdir(squat, 0o777)) == 0
    assert os.stat(squat).st_uid == OTHER_UID
    with master() as m:
        memory, _ = _plant(squat, _stem(m.address))
        node = ["node", "--master", m.address, "--segment-size", "16MiB"]
        with kvstore_process(node) as (proc, _), Store.connect(m.address, rpc_busy_poll_us=0) as store:
            data = values(4)
            assert store.batch_put_from(["a", "b", "c", "d"], data) == [0] * 4
            assert store.batch_get(["a", "b", "c", "d"]) == [v.tobytes() for v in data]
            assert not any(path.startswith(str(shared_dir)) for path in mapped_files(proc.pid))
            assert sorted(os.listdir(squat)) == sorted([memory.name, memory.with_suffix(".held").name])


# -- item 11: the master's KV events ----------------------------------------------------------------------
def test_kv_events_on_tcp_need_an_explicit_flag() -> None:
    """Was: any local user could subscribe to a loopback tcp endpoint and learn every key, secret or not."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    refused = ["master", "--port", "0", "--kv-events-endpoint", endpoint]
    with pytest.raises(KVStoreError, match="kv-events-tcp"), kvstore_process(refused):
        pass
    with kvstore_process(["master", "--port", "0", "--kv-events-endpoint", endpoint, "--kv-events-tcp"]):
        pass


def test_the_kv_events_socket_is_its_users_only(shared_dir: Path) -> None:
    """An ipc endpoint in a directory everyone may enter: the socket is 0600, another user cannot connect;
    in a directory the master makes: that is 0700."""
    need_root()
    open_path = shared_dir / "events"
    made = shared_dir / "made" / "events"
    for path in (open_path, made):
        with kvstore_process(["master", "--port", "0", "--kv-events-endpoint", f"ipc://{path}"]):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

            def subscribe(where: Path = path) -> None:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(where))

            assert run_as_other(subscribe) == 1
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))  # its own user may
    assert stat.S_IMODE(os.stat(made.parent).st_mode) == 0o700


def test_kv_events_are_never_bound_where_another_user_could_replace_the_socket(shared_dir: Path) -> None:
    """Review of issue 39 (inconsistencies): the KV events directory was made with makedirs(0700,
    exist_ok=True), which took a directory another user made first (or one open to all, not sticky), where
    they can remove the socket and put their own in its place for subscribers. Now it is checked as the
    node's private files are (kvstore.local_files): this user's or root's, closed to others or sticky."""
    need_root()
    theirs, wide = shared_dir / "theirs", shared_dir / "wide"
    assert run_as_other(lambda: os.mkdir(theirs, 0o755)) == 0
    wide.mkdir()
    os.chmod(wide, 0o777)
    for directory, why in ((theirs, f"uid {OTHER_UID}"), (wide, "not sticky")):
        args = ["master", "--port", "0", "--kv-events-endpoint", f"ipc://{directory}/events"]
        with pytest.raises(KVStoreError, match=why), kvstore_process(args):
            pass
        assert not (directory / "events").exists()
    with kvstore_process(["master", "--port", "0", "--kv-events-endpoint", f"ipc://{shared_dir}/events"]):
        assert stat.S_IMODE(os.stat(shared_dir / "events").st_mode) == 0o600  # sticky: only ours to remove
