"""A node's local files against another user of its host (issue 39, items 2, 10 and 11): its private
directory, what it adopts, the catalog's tags, the one-process-per-file lock, the disk index's mode, the
TLS key's mode and `kvstore secret new --force`. The other user is real (uid 65534, as root)."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgpack
import numpy as np
import pytest
import xxhash

from kvstore import local_files
from kvstore.config import NodeConfig
from kvstore.config.secret_file import new_secret_file
from kvstore.config.security import SecurityConfig
from kvstore.errors import KVStoreError, PermissionDeniedError
from kvstore.local_files import adoptable, discard_unadoptable, first_private_directory, private_directory
from kvstore.node import file_lock, identity, node_key
from kvstore.node.catalog import SegmentCatalog
from kvstore.node.disk_index import DiskIndex, IndexEntry
from kvstore.node.identity import MAX_SLOTS, NodeIdentity, lock_directory
from kvstore.rpc.messages import HeldReplica
from kvstore.rpc.tls import check_key_file, server_context
from tests.helpers.other_user import OTHER_UID, held_by_other, need_root, run_as_other
from transfer_engine import TransferEngine


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def shared_base() -> Iterator[Path]:
    """A directory like /dev/shm (where the other user can reach it): everyone may create in it
    (sticky)."""
    base = Path(
        tempfile.mkdtemp(prefix="kvstore-test-shared-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    os.chmod(base, 0o1777)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the private directory ---------------------------------------------------------------------------------
def test_a_shared_directory_gets_a_private_one_of_this_user_and_a_private_one_is_used_as_it_is(
    shared_base: Path,
) -> None:
    base = shared_base
    mine = private_directory(str(base))
    assert mine == str(base / f"kvstore-{os.geteuid()}") and _mode(mine) == 0o700
    os.chmod(mine, 0o755)  # opened by someone: closed again
    assert private_directory(str(base)) == mine and _mode(mine) == 0o700
    assert private_directory(mine) == mine  # already private: itself


def test_a_private_directory_name_another_user_took_first_is_refused(shared_base: Path) -> None:
    base = shared_base
    squat = base / f"kvstore-{os.geteuid()}"
    assert run_as_other(lambda: os.mkdir(squat, 0o777)) == 0
    with pytest.raises(PermissionDeniedError, match=f"uid {OTHER_UID}"):
        private_directory(str(base))


def test_another_user_cannot_plant_a_file_in_the_private_directory(shared_base: Path) -> None:
    mine = private_directory(str(shared_base))
    planted = os.path.join(mine, "kvstore-node-x-0.mem")
    assert run_as_other(lambda: os.close(os.open(planted, os.O_CREAT | os.O_WRONLY, 0o666))) == 1
    assert not os.path.exists(planted)


def test_names_another_user_took_everywhere_leave_a_directory_of_this_process_own(
    shared_base: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Review of issue 39, item 9: `mkdir /dev/shm/kvstore-<uid> /tmp/kvstore-<uid>` by another user kept
    a node from starting (its identity locks had nowhere to go). The next base is taken (/run/user/<uid>
    where there is one), and when every one is taken, a mkdtemp directory of this process's own (the
    same for its life), with what that costs in the log."""
    bases = [shared_base / "shm", shared_base / "tmp"]
    for base in bases:
        base.mkdir()
        os.chmod(base, 0o1777)
    squats = [base / f"kvstore-{os.geteuid()}" for base in bases]
    assert run_as_other(lambda: os.mkdir(squats[0], 0o777)) == 0
    assert first_private_directory([str(b) for b in bases], "x") == str(squats[1])  # the next base
    os.rmdir(squats[1])
    assert run_as_other(lambda: os.mkdir(squats[1], 0o777)) == 0
    monkeypatch.setattr(local_files, "_own", {})
    monkeypatch.setattr(identity, "lock_bases", lambda: [str(b) for b in bases])
    caplog.set_level("WARNING", logger="kvstore")
    own = identity.lock_directory()
    assert Path(own).parent == bases[0] and _mode(own) == 0o700 and os.stat(own).st_uid == os.geteuid()
    assert identity.lock_directory() == own  # the same for the process's life
    assert [r for r in caplog.records if "identity slots" in r.getMessage()]
    assert run_as_other(lambda: os.listdir(own)) == 1
    config = NodeConfig.load(segment_size=1 << 20, name="squatted-test")
    first = NodeIdentity(config, "m:1")  # the node starts: was PermissionDeniedError
    twin = NodeIdentity(config, "m:1")
    assert (first.slot, twin.slot) == (0, 1)  # (within this process, twins still see each other's locks)
    key = node_key.load(first.stem)
    assert os.path.dirname(node_key.path_of(first.stem)) == own and node_key.load(first.stem) == key
    first.release()
    twin.release()


def test_a_node_with_a_disk_keeps_its_key_beside_the_disk_file(tmp_path: Path) -> None:
    """Review of issue 39, item 9: a key in tmpfs only is a new identity after a reboot. Beside the disk
    file it is private (0600, never through a link), the same at each start, and a key an earlier version
    kept in the private directory is carried over (the node stays the identity it was)."""
    stem = f"beside-disk-test-{os.getpid()}-0"
    old = Path(node_key.path_of(stem))
    disk = tmp_path / "tier"
    old.unlink(missing_ok=True)
    try:
        earlier = node_key.load(stem)  # as an earlier version kept it
        assert node_key.load(stem, str(disk)) == earlier
        beside = Path(node_key.path_of(stem, str(disk)))
        assert beside == tmp_path / "tier.node-key" and _mode(beside) == 0o600
        old.unlink()  # the reboot: tmpfs is empty
        assert node_key.load(stem, str(disk)) == earlier
        beside.unlink()
        beside.symlink_to(tmp_path / "elsewhere")
        with pytest.raises(PermissionDeniedError, match="not this user's private file"):
            node_key.load(stem, str(disk))
        assert not (tmp_path / "elsewhere").exists()
        if os.geteuid() == 0:
            beside.unlink()
            beside.write_text("0" * 32)
            os.chmod(beside, 0o600)
            os.chown(beside, OTHER_UID, OTHER_UID)  # planted beside a --disk in a shared directory
            with pytest.raises(PermissionDeniedError, match="not this user's private file"):
                node_key.load(stem, str(disk))
    finally:
        old.unlink(missing_ok=True)


# -- what is adopted --------------------------------------------------------------------------------------
def test_only_this_users_private_regular_file_with_one_link_is_adopted(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"x")
    os.chmod(good, 0o600)
    assert adoptable(str(good)) == "" and adoptable(str(tmp_path / "none")) == ""
    open_to_all = tmp_path / "open"
    open_to_all.write_bytes(b"x")
    os.chmod(open_to_all, 0o666)
    assert "mode" in adoptable(str(open_to_all))
    linked = tmp_path / "linked"
    os.link(good, linked)
    assert "2 links" in adoptable(str(linked))
    os.unlink(linked)
    link = tmp_path / "link"
    link.symlink_to(good)
    assert adoptable(str(link)) == "not a regular file"
    discard_unadoptable(str(open_to_all), "test file")
    discard_unadoptable(str(good), "test file")
    assert not open_to_all.exists() and good.exists()


def test_a_segment_file_of_another_user_is_never_mapped(tmp_path: Path) -> None:
    """The registry's own check (the memory a node maps): another user's file, one open to others, or a
    link is refused; a new one is made 0600 and only by this process."""
    need_root()
    theirs = tmp_path / "theirs.mem"
    theirs.write_bytes(b"\0" * 4096)
    os.chown(theirs, OTHER_UID, OTHER_UID)
    os.chmod(theirs, 0o600)
    wide = tmp_path / "wide.mem"
    wide.write_bytes(b"\0" * 4096)
    os.chmod(wide, 0o666)
    link = tmp_path / "link.mem"
    link.symlink_to(tmp_path / "target.mem")
    with TransferEngine() as engine:
        for path, why in ((theirs, f"owned by uid {OTHER_UID}"), (wide, "open to other users")):
            with pytest.raises(PermissionDeniedError, match=why):
                engine.allocate(1 << 20, backing_file=str(path))
        with pytest.raises(KVStoreError):
            engine.allocate(1 << 20, backing_file=str(link))
        assert not (tmp_path / "target.mem").exists()  # never created through the link
        region = engine.allocate(1 << 20, backing_file=str(tmp_path / "new.mem"))
        assert _mode(tmp_path / "new.mem") == 0o600
        engine.unregister(region)


# -- the catalog's tags -----------------------------------------------------------------------------------
def _held(memory: np.ndarray, slot: int) -> HeldReplica:
    data = memory[slot * 4096 : (slot + 1) * 4096]
    return HeldReplica(
        slot, 1, slot * 4096, slot, 10 + slot, f"k{slot}", 4096, xxhash.xxh3_64_intdigest(data), False, 1
    )


def test_a_catalog_names_its_objects_only_to_a_holder_of_the_secret_that_wrote_it(tmp_path: Path) -> None:
    memory = np.random.default_rng(7).integers(0, 256, 1 << 16, dtype=np.uint8)
    path = str(tmp_path / "segment.held")
    catalog = SegmentCatalog(path, secret=b"the cluster secret one")
    catalog.hold([_held(memory, s) for s in range(4)])
    catalog.hold([_held(memory, s) for s in range(4, 8)])
    catalog.close()
    assert _mode(path) == 0o600
    assert len(SegmentCatalog(path, secret=b"another cluster secret")) == 0  # (it rewrites the file)
    catalog = SegmentCatalog(path, secret=b"the cluster secret one")
    assert len(catalog) == 0  # what the other secret found is all the file names now
    catalog.hold([_held(memory, s) for s in range(8)])
    catalog.close()
    assert len(SegmentCatalog(path, secret=b"the cluster secret one").verified(memory)) == 8


def test_a_forged_or_spliced_catalog_names_nothing_past_the_first_record_that_fails(tmp_path: Path) -> None:
    """What a planter writes: a catalog in the old format (no tags), and records cut from another file of
    the same secret and appended to this one."""
    memory = np.random.default_rng(8).integers(0, 256, 1 << 16, dtype=np.uint8)
    forged = tmp_path / "forged.held"
    forged.write_bytes(msgpack.packb([0, [tuple(_held(memory, s))[2:] for s in range(4)]]))
    assert len(SegmentCatalog(str(forged))) == 0
    secret = b"the cluster secret"
    one, two = str(tmp_path / "one.held"), str(tmp_path / "two.held")
    for path, slots in ((one, range(0, 2)), (two, range(2, 4))):
        catalog = SegmentCatalog(path, secret=secret)
        catalog.hold([_held(memory, s) for s in slots])
        catalog.hold([_held(memory, s + 8) for s in slots])
        catalog.close()
    with open(two, "rb") as f:
        foreign = f.read()
    unpacker = msgpack.Unpacker()
    unpacker.feed(foreign)
    next(unpacker)  # its header
    with open(one, "ab") as f:
        f.write(foreign[unpacker.tell() :])  # its records, tags and all
    assert sorted(r[1] for r in SegmentCatalog(one, secret=secret).verified(memory)) == [0, 1, 8, 9]


# -- one process per file ---------------------------------------------------------------------------------
def test_a_file_another_process_holds_is_refused_naming_that_process(tmp_path: Path) -> None:
    path = tmp_path / "tier"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT, 0o600); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(PermissionDeniedError, match=f"in use by the process {holder.pid}"):
            file_lock.hold(str(path), "disk")
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    key = file_lock.hold(str(path), "disk")  # free again
    again = file_lock.hold(str(path), "disk")  # (this process counts its holds)
    assert again == key
    file_lock.release(key)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # still held once
        file_lock.release(key)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # given back with the last hold
    finally:
        os.close(fd)


def test_a_data_file_reached_through_a_link_or_open_to_others_is_refused(tmp_path: Path) -> None:
    """A --disk in a shared directory (/tmp): a link planted there would have the node write its records
    over whatever it names; a file others may read gives them the users' data."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.chmod(victim, 0o600)
    link = tmp_path / "tier"
    link.symlink_to(victim)
    with pytest.raises(PermissionDeniedError, match="symbolic link"):
        file_lock.hold(str(link), "disk")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "made-through-it")
    with pytest.raises(KVStoreError):
        file_lock.hold(str(dangling), "disk")
    assert victim.read_bytes() == b"precious" and not (tmp_path / "made-through-it").exists()
    wide = tmp_path / "wide"
    wide.write_bytes(b"")
    os.chmod(wide, 0o644)
    with pytest.raises(PermissionDeniedError, match="chmod 600"):
        file_lock.hold(str(wide), "disk")
    if os.geteuid() == 0:
        os.chmod(wide, 0o600)
        os.chown(wide, OTHER_UID, OTHER_UID)
        with pytest.raises(PermissionDeniedError, match=f"uid {OTHER_UID}"):
            file_lock.hold(str(wide), "disk")
    fresh = tmp_path / "fresh"
    file_lock.release(file_lock.hold(str(fresh), "disk"))
    assert _mode(fresh) == 0o600


def test_identity_locks_held_by_another_user_do_not_keep_a_node_from_starting() -> None:
    """Was: the 256 lock files were /dev/shm/kvstore-node-<base>-<slot>.lock, which any local user could
    create first and flock: every slot taken, the node refused to start."""
    config = NodeConfig.load(segment_size=1 << 20, name="identity-attack-test")
    first = NodeIdentity(config, "m:1")
    first.release()
    directory = lock_directory()
    assert _mode(directory) == 0o700 and os.stat(directory).st_uid == os.geteuid()

    def take_every_slot() -> list[int]:
        held = []
        for slot in range(MAX_SLOTS):
            for where in ("/dev/shm", directory):  # the old place, and the private one (refused)
                try:
                    fd = os.open(
                        f"{where}/kvstore-node-{first.base}-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o666
                    )
                except PermissionError:
                    continue
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held.append(fd)
        return held

    try:
        with held_by_other(take_every_slot):
            identity = NodeIdentity(config, "m:1")
            assert identity.slot == 0
            identity.release()
    finally:
        for slot in range(MAX_SLOTS):
            if (
                os.path.exists(p := f"/dev/shm/kvstore-node-{first.base}-{slot}.lock")
                and os.stat(p).st_uid == OTHER_UID
            ):
                os.unlink(p)


# -- the disk index ---------------------------------------------------------------------------------------
def test_the_disk_index_is_written_readable_by_its_user_only(tmp_path: Path) -> None:
    path = tmp_path / "tier.index"
    path.write_bytes(b"")
    os.chmod(path, 0o644)  # as an older node left it
    index = DiskIndex(str(path))
    index.rewrite([IndexEntry(0, "secret/key", 4096, 1)])
    assert _mode(path) == 0o600
    index.try_room(1 << 16)
    assert [e.key for e in DiskIndex(str(path)).read()] == ["secret/key"]  # the room was cut back off
    assert path.stat().st_size < 1 << 10


# -- TLS key and the secret file --------------------------------------------------------------------------
def test_a_tls_key_other_users_may_read_is_refused(tmp_path: Path) -> None:
    key, cert = tmp_path / "master.key", tmp_path / "master.pem"
    key.write_text("not read: its mode is checked first")
    cert.write_text("")
    os.chmod(key, 0o640)
    with pytest.raises(PermissionDeniedError, match="chmod 600"):
        check_key_file(str(key))
    with pytest.raises(PermissionDeniedError, match="open to other users"):
        server_context(SecurityConfig.load(tls_cert=str(cert), tls_key=str(key)))
    os.chmod(key, 0o600)
    check_key_file(str(key))


def test_secret_new_force_never_writes_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    target = tmp_path / "where-they-read"
    target.write_text("theirs\n")
    link = tmp_path / "cluster.secret"
    link.symlink_to(target)
    with pytest.raises(PermissionDeniedError, match="symbolic link"):
        new_secret_file(link, overwrite=True)
    assert target.read_text() == "theirs\n"
    link.unlink()
    os.link(target, link)
    with pytest.raises(PermissionDeniedError, match="one link"):
        new_secret_file(link, overwrite=True)
    assert target.read_text() == "theirs\n"
    link.unlink()
    os.mkfifo(link)
    with pytest.raises(KVStoreError):  # (never blocks on a FIFO nobody reads)
        new_secret_file(link, overwrite=True)
    link.unlink()
    link.write_text("old\n")
    new_secret_file(link, overwrite=True)
    assert len(link.read_text().strip()) == 64 and _mode(link) == 0o600
    cli = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "secret", "new", "--force", str(tmp_path / "l2")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0
    (tmp_path / "l3").symlink_to(target)
    cli = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "secret", "new", "--force", str(tmp_path / "l3")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode != 0 and "symbolic link" in cli.stderr and target.read_text() == "theirs\n"
