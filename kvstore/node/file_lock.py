"""One process per data file: a node holds its disk file and its segment's memory file locked for its life
(an exclusive flock on a descriptor of its own; the kernel drops it when the process dies, however it
dies), so a second node started on the same file is refused at once, naming the process that holds it,
instead of writing over the first one's records. A data file is also checked to be this user's own and
closed to others (it holds users' data), and never reached through a planted link."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading

from kvstore.errors import InvalidArgumentError, PermissionDeniedError

_held: dict[tuple[int, int], tuple[int, int]] = {}  # (device, inode) -> (descriptor, holds)
_lock = threading.Lock()


def holder(path: str) -> int | None:
    """The pid of the process holding a flock on the file at `path` (from /proc/locks), if one is seen."""
    try:
        info = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in lines:
        fields = line.split()  # "1: FLOCK ADVISORY WRITE <pid> <maj:min:inode> 0 EOF"; waiters have "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where and fields[4].isdigit():
            return int(fields[4])
    return None


Held = tuple[int, int]  # the file's (device, inode)


def _open(path: str, what: str) -> int:
    """The file at `path` (created, mode 0600, when missing), opened to be held. A regular file must be
    this user's, closed to others, with one link, and not reached through a symbolic link (one planted in
    a shared directory would have the node write its records over whatever it names); a device may be
    (/dev/disk/by-id/...), its permissions are the administrator's."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise InvalidArgumentError(f"cannot open the {what} {path}: {exc.strerror or exc}") from exc
        fd = -1
    if fd < 0:  # a link: followed only to a block device
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot open the {what} {path}: {exc.strerror or exc}") from exc
        if not stat.S_ISBLK(os.fstat(fd).st_mode):
            os.close(fd)
            raise PermissionDeniedError(
                f"the {what} {path} is a symbolic link to a file: name the file itself"
            )
    info = os.fstat(fd)
    uid = os.geteuid()
    if stat.S_ISREG(info.st_mode) and (info.st_uid != uid or info.st_mode & 0o077 or info.st_nlink != 1):
        os.close(fd)
        raise PermissionDeniedError(
            f"the {what} {path} is not this user's private file (uid {info.st_uid}, "
            f"{stat.filemode(info.st_mode)}, {info.st_nlink} links; it holds users' data): "
            f"chown it to uid {uid} and chmod 600 it, or give the node a file of its own"
        )
    return fd


def hold(path: str, what: str) -> Held:
    """Locks the file at `path` (created, mode 0600, when missing; checked by _open) for this process's
    life, or until release(); a second hold by this process counts. PermissionDeniedError naming the
    holder when another process holds it."""
    fd = _open(path, what)
    info = os.fstat(fd)
    key = (info.st_dev, info.st_ino)
    with _lock:
        if key in _held:
            os.close(fd)
            held_fd, count = _held[key]
            _held[key] = (held_fd, count + 1)
            return key
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            pid = holder(path)
            who = f"the process {pid}" if pid else "another process"
            raise PermissionDeniedError(
                f"the {what} {path} is in use by {who} (a node of its own): two nodes on one file would "
                "overwrite each other's objects; stop that one, or give this one a file of its own"
            ) from exc
        _held[key] = (fd, 1)
    return key


def release(key: Held) -> None:
    """Gives back one hold (the lock goes with the last)."""
    with _lock:
        if key not in _held:
            return
        fd, count = _held[key]
        if count > 1:
            _held[key] = (fd, count - 1)
        else:
            del _held[key]
            with contextlib.suppress(OSError):
                os.close(fd)
