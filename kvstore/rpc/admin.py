"""The admin credential: a second secret, apart from the cluster secret every member holds, that the
destructive calls need (removing everything, forcing the removal of what other clients wrote and
readers hold). A client proves it in a request of its own: the master hands it a fresh nonce
(AdminChallenge), the client answers with an HMAC of the nonce and its client id (AdminProve), and the
master remembers the role for that registration. The secret never crosses the wire and the master never
MACs anything with it, so a member that holds only the cluster secret gains no oracle to guess it with.

    KVSTORE_ADMIN_SECRET_FILE / KVSTORE_ADMIN_SECRET                  a client's (StoreConfig)
    KVSTORE_MASTER_ADMIN_SECRET_FILE / KVSTORE_MASTER_ADMIN_SECRET    the master's (MasterConfig)
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

from kvstore.errors import InvalidArgumentError, PermissionDeniedError
from transfer_engine.security import check_strength

_LABEL = b"kvstore-admin-v1\0"


def proof(secret: bytes, client_id: str, nonce: str) -> str:
    """What AdminProve carries: HMAC-SHA256 over the client id and the master's nonce (hex)."""
    return hmac.new(secret, _LABEL + client_id.encode() + b"\0" + nonce.encode(), hashlib.sha256).hexdigest()


def load_secret(secret: str, path: str, variable: str) -> bytes:
    """The admin secret given as `secret` or in the file `path` (b"" when neither is set); `variable`
    names the setting in errors (its _FILE variant for the file). The file must be its owner's alone, a
    plain file (no symlink), and the secret as random as a cluster secret must be (128 bits at least:
    transfer_engine.security.check_strength), since a member may guess it offline against a proof it
    sniffed."""
    if secret and path:
        raise InvalidArgumentError(f"{variable} and {variable}_FILE are both set: name the admin secret once")
    where = f"{variable}_FILE={path}" if path else variable
    if path:
        secret = _read_private(Path(path), f"{variable}_FILE")
    if secret:
        check_strength(secret, f"{where} (an admin secret, held to the cluster secret's rule)")
    return secret.encode()


def _read_private(path: Path, variable: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgumentError(f"{variable}={path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd) as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PermissionDeniedError(
                f"{variable}={path} must be a plain file readable by its owner only "
                f"(mode {stat.filemode(info.st_mode)}): chmod 600 {path}"
            )
        if info.st_uid != os.geteuid():
            raise PermissionDeniedError(f"{variable}={path} belongs to another user (uid {info.st_uid})")
        return file.read(4096).strip()
