"""A node's key (kvstore.node.node_key): made once, private, the same across the node's restarts, and
never taken from a file someone else could have written or read."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore.errors import PermissionDeniedError
from kvstore.node import node_key
from kvstore.node.identity import lock_directory


@pytest.fixture
def stem() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:12]}-0"
    yield name
    path = os.path.join(lock_directory(), f"kvstore-node-{name}.key")
    if os.path.lexists(path):
        os.unlink(path)


def key_file(stem: str) -> str:
    return os.path.join(lock_directory(), f"kvstore-node-{stem}.key")


def test_a_key_is_made_private_once_and_kept(stem: str) -> None:
    key = node_key.load(stem)
    assert len(key) == 32 and node_key.load(stem) == key  # the node restarted: the same key
    info = os.lstat(key_file(stem))
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
    with open(key_file(stem), "w") as f:
        f.write("not a key")
    assert node_key.load(stem) not in (key, "not a key")  # malformed: made afresh


@pytest.mark.parametrize("how", ["open to others", "a link to another file", "two links"])
def test_a_key_file_others_may_know_is_refused(stem: str, how: str) -> None:
    path = key_file(stem)
    planted = path + ".planted"
    with open(planted, "w") as f:
        f.write("0" * 32)
    os.chmod(planted, 0o600)
    if how == "open to others":
        os.rename(planted, path)
        os.chmod(path, 0o644)
    elif how == "a link to another file":
        os.symlink(planted, path)
    else:
        os.link(planted, path)
    try:
        with pytest.raises(PermissionDeniedError, match="not this user's private file"):
            node_key.load(stem)
    finally:
        if os.path.lexists(planted):
            os.unlink(planted)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant a file as another user")
def test_a_key_file_of_another_user_is_refused(stem: str) -> None:
    path = key_file(stem)
    with open(path, "w") as f:
        f.write("0" * 32)
    os.chmod(path, 0o600)
    os.chown(path, 12345, 12345)
    with pytest.raises(PermissionDeniedError, match="not this user's private file"):
        node_key.load(stem)


def test_a_clean_stop_forgets_the_key_of_a_node_without_a_disk(tmp_path: Path) -> None:
    stem = f"forget-{uuid.uuid4().hex}"
    key = node_key.load(stem)
    node_key.forget(stem, disk=str(tmp_path / "tier"))  # (with a disk: kept, its records name it)
    assert node_key.load(stem) == key
    node_key.forget(stem)
    assert not os.path.exists(node_key.path_of(stem))
    node_key.forget(stem)  # (twice: nothing to do)
