"""Files a kvstore process keeps on its host for itself (a node's segment and catalog, its identity locks,
the master's KV events socket): in a directory only this user can enter, so another local user can
neither plant a file there first nor hold, read or replace one. What is found there is adopted only when
it is this user's own regular file, readable by nobody else, with one link (a file planted before the
directory was private, or hard-linked in, is not)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence

from kvstore.errors import PermissionDeniedError

log = logging.getLogger("kvstore")


def _private(info: os.stat_result, uid: int) -> bool:
    return stat.S_ISDIR(info.st_mode) and info.st_uid == uid and not info.st_mode & 0o077


def private_directory(base: str) -> str:
    """`base` when it is this user's directory already closed to everyone else; else its subdirectory
    `kvstore-<uid>`, made (mode 0700) or checked to be this user's (and closed if it was open). Raises
    PermissionDeniedError when that name is taken by another user or is not a directory: someone may be
    waiting for this process's files there."""
    uid = os.geteuid()
    with contextlib.suppress(OSError):
        if _private(os.lstat(base), uid):
            return base
    path = os.path.join(base, f"kvstore-{uid}")
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise PermissionDeniedError(
            f"{path} is not a directory of this user (uid {uid}; it is uid {info.st_uid}'s "
            f"{stat.filemode(info.st_mode)}): another local user may have made it to get at this process's "
            "files. Remove it, or choose another directory"
        )
    if info.st_mode & 0o077:  # ours but open: what is in it is checked file by file (adoptable)
        os.chmod(path, 0o700)
    return path


_own: dict[tuple[str, ...], str] = {}  # per list of bases: this process's own directory, once made


def first_private_directory(bases: Sequence[str], lost: str) -> str:
    """This user's private directory in the first of `bases` (writable directories) that has one to give
    (private_directory). When another user took the name in every one (a `mkdir /dev/shm/kvstore-<uid>`
    must not keep this process from starting), a directory of this process's own, made by mkdtemp (0700,
    a name nobody can take first) in the first base, the same for the rest of this process's life: logged
    with what that costs (`lost`: other processes of this user no longer find what this one keeps)."""
    refused: list[str] = []
    for base in bases:
        try:
            return private_directory(base)
        except (OSError, PermissionDeniedError) as exc:
            refused.append(str(exc))
    key = tuple(bases)
    if key not in _own:
        if not bases:
            raise PermissionDeniedError(f"no writable directory for this process's private files: {lost}")
        _own[key] = tempfile.mkdtemp(prefix=f"kvstore-{os.geteuid()}-", dir=bases[0])
        atexit.register(shutil.rmtree, _own[key], ignore_errors=True)  # (no later process finds it)
        log.warning(
            "no private directory of this user could be had (%s): using %s, this process's own; %s",
            "; ".join(refused),
            _own[key],
            lost,
        )
    return _own[key]


def unsafe_directory(path: str) -> str:
    """Why another user could remove, replace or plant what this user makes in the directory `path` (""
    when nobody can): it must be a directory (not a link) of this user or root, and writable by nobody
    else unless sticky (as /tmp and /dev/shm, where only a file's owner may remove or rename it)."""
    info = os.lstat(path)
    uid = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory (a link or a file)"
    if info.st_uid not in (uid, 0):
        return f"owned by uid {info.st_uid}, not {uid} (nor root)"
    if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        return f"{stat.filemode(info.st_mode)}: others may write in it, and it is not sticky"
    return ""


def adoptable(path: str) -> str:
    """Why the existing file at `path` may not be taken as this process's own ("" when it may, or when
    there is none): it must be this user's regular file (not a link), of mode 0600 or less, with one
    link."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ""
    uid = os.geteuid()
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != uid:
        return f"owned by uid {info.st_uid}, not {uid}"
    if info.st_mode & 0o077:
        return f"mode {stat.filemode(info.st_mode)}: open to others"
    if info.st_nlink != 1:
        return f"{info.st_nlink} links"
    return ""


def discard_unadoptable(path: str, what: str) -> None:
    """Removes the file at `path` if one is there that may not be adopted (said in the log): what it
    holds is not trusted, and the name is made afresh."""
    why = adoptable(path)
    if why:
        log.warning("%s %s is not adopted (%s): removed, starting afresh", what, path, why)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
