"""A storage node's key: a secret its identity keeps across restarts. The master knows a node's identity
by the fingerprint of the key pair it seeds (kvstore.rpc.messages.node_key_fingerprint) and lets a
registration take the identity only when it is signed with the key over a fresh master nonce (the key
never crosses the wire: kvstore.rpc.node_proof), and supersede an earlier registration only once that
process is found gone: the same node restarted, never a member that names it. The file is read and
made only while this process holds the identity's lock (or its disk file's), so twins never race for it.

Where: beside the node's --disk file (`<disk>.node-key`, mode 0600) when it has one, so the key lives as
long as the records it names: after a reboot (or a container made anew) the node is the same identity
and takes its disk records back, where a new key would have had them refused as another node's. Without
a disk, beside its identity lock (this user's private directory in shared memory:
kvstore.node.identity.lock_directory), gone at reboot with the segment it names."""

from __future__ import annotations

import contextlib
import os
import stat

from kvstore.errors import PermissionDeniedError
from kvstore.node.identity import lock_directory
from kvstore.rpc import messages as m

KEY_CHARS = 32  # hex digits: 128 bits


def path_of(stem: str, disk: str = "") -> str:
    """Where the key of the node identity `stem` (NodeIdentity.stem) with the disk file `disk` is kept."""
    if disk:
        return os.path.abspath(disk) + ".node-key"
    return os.path.join(lock_directory(), f"kvstore-node-{stem}.key")


def load(stem: str, disk: str = "") -> str:
    """The key of the node identity `stem` (whose lock the caller holds; with `disk`, that file's lock
    too): the one its last process kept, else a new one, kept for its next. A node with a disk whose key
    an older version kept in the private directory takes that one beside its disk."""
    path = path_of(stem, disk)
    key = _read(path)
    if key:
        return key
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # (unreadable or malformed: made afresh)
    if disk:
        with contextlib.suppress(PermissionDeniedError):  # (one not private is not taken)
            key = _read(path_of(stem))
    key = key or m.new_token()
    _write(path, key)
    return key


def forget(stem: str, disk: str = "") -> None:
    """A clean stop of a node without a disk: the master forgot its objects and its segment is gone, so
    nothing is left for its identity to take back; the key goes with them (a disk's stays: its records
    are offered again at the next start)."""
    if not disk:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path_of(stem))


def _write(path: str, key: str) -> None:
    """Makes the key file (never through a link or over a file another made meanwhile), on the disk
    before the key is used: a key the node registered with and then lost to a power cut would cost its
    identity."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key)
        out.flush()
        os.fsync(out.fileno())
    directory = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _read(path: str) -> str:
    """The key in `path`; "" when there is none or it is malformed. PermissionDeniedError when the file
    is not this user's own private file with one link (someone else may know what it says)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    except OSError as exc:  # (a symbolic link: someone else chose where it points)
        raise PermissionDeniedError(
            f"the node key {path} is not this user's private file ({exc.strerror}): remove it to start afresh"
        ) from exc
    with os.fdopen(fd) as file:
        info = os.fstat(file.fileno())
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.geteuid()
            or info.st_mode & 0o077
            or info.st_nlink != 1
        ):
            raise PermissionDeniedError(
                f"the node key {path} is not this user's private file (uid {info.st_uid}, "
                f"{stat.filemode(info.st_mode)}, {info.st_nlink} links): remove it to start afresh"
            )
        key = file.read(KEY_CHARS + 1)
    return key if len(key) == KEY_CHARS and set(key) <= set("0123456789abcdef") else ""
