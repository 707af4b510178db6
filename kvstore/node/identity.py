"""A storage node's identity on its host: the same command line and environment give the same one, so
a node restarted after a crash is known for what it is. The master lets a node that registers with an
identity supersede the old registration at once (its segments are gone, its disk records are offered
back), rather than wait out the old one's TTL while it deletes what the disk still holds.

The identity is a digest of what defines the node (its user, its master, its disk, its memory size, or
the name given with KVSTORE_NODE_NAME) and a slot: identical nodes on one host take the first slot no
living node holds (a lock file held for the process's life; the kernel drops it when the process dies),
so two such nodes never share an identity, and a restarted one takes a slot its dead twin left. The lock
files are in the user's private directory, where no other user can hold them all to keep a node from
starting. (Two nodes on one disk file are kept apart by the disk's own lock: kvstore.node.file_lock.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile

import xxhash

from kvstore.config import NodeConfig
from kvstore.errors import InvalidArgumentError
from kvstore.local_files import first_private_directory

MAX_SLOTS = 256


def lock_directory() -> str:
    """Where node identity locks (and the keys of nodes without a disk) live: this user's private
    directory (kvstore.local_files) in shared memory where the host has it (gone at reboot, as the
    identities' memory is), else in /run/user/<uid> (private already, where there is a login session),
    else in the temporary directory. Private, so another local user can neither hold the locks (and keep
    every slot taken) nor plant them. One who took the name in all of them (`mkdir
    /dev/shm/kvstore-<uid> /tmp/kvstore-<uid>`) does not stop the node: it uses a directory of its own
    (mkdtemp), and loses what the shared one gave (LOST_WITHOUT_SHARED)."""
    return first_private_directory(lock_bases(), LOST_WITHOUT_SHARED)


def lock_bases() -> list[str]:
    """Where lock_directory looks, in order: those of them that are writable directories here."""
    candidates = ("/dev/shm", f"/run/user/{os.geteuid()}", tempfile.gettempdir())
    return [b for b in candidates if os.path.isdir(b) and os.access(b, os.W_OK)]


LOST_WITHOUT_SHARED = (
    "identical nodes on this host (same settings, no KVSTORE_NODE_NAME) no longer see each other's "
    "identity slots, and a node without a disk gets a new key, so a new identity, at each start (its "
    "restart waits out its old registration's TTL instead of superseding it; a node with a disk keeps its "
    "key beside the disk file). Remove the directories another user made to get them back"
)


class NodeIdentity:
    """Claims this node's identity for the life of the process (release() or exit gives it back)."""

    def __init__(self, config: NodeConfig, master: str) -> None:
        if config.name:  # checked by NodeConfig: fit for a file name
            self.base = config.name
        else:
            disk = os.path.abspath(config.disk) if config.disk else ""
            # (two users' nodes never share one: their locks are in directories of their own)
            defining = f"uid={os.geteuid()} master={master} disk={disk} segment={config.segment_size}"
            self.base = xxhash.xxh3_64_hexdigest(defining.encode())
        self._fd = -1
        directory = lock_directory()
        for slot in range(MAX_SLOTS):
            path = os.path.join(directory, f"kvstore-node-{self.base}-{slot}.lock")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._fd, self.slot = fd, slot
            self.name = f"{self.base}/{slot}"  # on this host; the master knows it as "<host id>/<name>"
            self.stem = f"{self.base}-{slot}"  # for the names of its files
            return
        raise InvalidArgumentError(
            f"{MAX_SLOTS} nodes with these settings already run on this host; give this one KVSTORE_NODE_NAME"
        )

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
