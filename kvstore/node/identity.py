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
from kvstore.errors import InvalidArgumentError, KVStoreError, PermissionDeniedError
from kvstore.local_files import private_directory

MAX_SLOTS = 256


def lock_directory() -> str:
    """Where node identity locks live: this user's private directory (kvstore.local_files) in shared
    memory where the host has it (gone at reboot, as the identities' memory is), else in the temporary
    directory. Private, so another local user can neither hold the locks (and keep every slot taken) nor
    plant them."""
    bases = [b for b in ("/dev/shm", tempfile.gettempdir()) if os.path.isdir(b) and os.access(b, os.W_OK)]
    refused: list[str] = []
    for base in bases:
        try:
            return private_directory(base)
        except (OSError, KVStoreError) as exc:
            refused.append(str(exc))
    raise PermissionDeniedError("no private directory for the node's identity locks: " + "; ".join(refused))


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
