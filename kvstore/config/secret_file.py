"""A new cluster secret file (`kvstore secret new`): 256 random bits, hex, readable by its owner only.
What a secret must be, and how one is read, is the engine's own (transfer_engine.security)."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from kvstore.errors import InvalidArgumentError, PermissionDeniedError


def made_directory(path: Path) -> Path | None:
    """The directory of `path`, made (mode 0700: the secret's readers are its owner's to add) when it is
    missing, as on a fresh host's /etc/kvstore; returns it when it was made, None when it was there."""
    directory = path.parent
    if directory.is_dir():
        return None
    try:
        os.makedirs(directory, mode=0o700)
    except FileExistsError as exc:  # (a file of that name: not a directory)
        raise InvalidArgumentError(f"{directory} is not a directory: cannot write {path}") from exc
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot make the directory {directory} for {path}: {exc.strerror or exc}"
        ) from exc
    return directory


def new_secret_file(path: Path, overwrite: bool = False) -> None:
    """Writes a fresh random secret (256 bits, hex) to `path`, readable by its owner only. `overwrite`
    replaces only this user's own regular file with one link: never through a symbolic link, a hard link
    or a FIFO someone planted to have the secret written where they can read it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | (0 if overwrite else os.O_EXCL), 0o600)
    except FileExistsError as exc:
        raise InvalidArgumentError(f"{path} exists (--force replaces it)") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PermissionDeniedError(
                f"{path} is a symbolic link: not followed (name the file itself)"
            ) from exc
        raise InvalidArgumentError(f"{path}: {exc.strerror or exc}") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
        os.close(fd)
        raise PermissionDeniedError(
            f"{path} is not this user's own regular file with one link: not replaced (remove it first)"
        )
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(secrets.token_hex(32) + "\n")
