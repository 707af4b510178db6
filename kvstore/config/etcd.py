"""How kvstore reaches etcd: TLS and credentials, `KVSTORE_ETCD_*` (every master, node and client of a
cluster that elects its leader in etcd reads them; the endpoints are each component's own `etcd`)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from kvstore.config.component import Component
from kvstore.errors import InvalidArgumentError, PermissionDeniedError
from transfer_engine.settings import setting


@dataclass
class EtcdConfig(Component):
    """etcd's TLS and credentials. Without them kvstore speaks plaintext to etcd with no identity, and
    whoever reaches etcd may write its keys (the leader record is still signed with the cluster secret:
    kvstore.rpc.etcd_records)."""

    ENV_PREFIX: ClassVar[str] = "KVSTORE_ETCD_"

    ca: str = setting(
        "", "PEM CA bundle: speak TLS to etcd and verify its certificate against this (else plaintext)."
    )
    cert: str = setting(
        "", "PEM client certificate presented to etcd (its --client-cert-auth), with `key`; needs `ca`."
    )
    key: str = setting("", "PEM private key of `cert`, readable by its owner only.")
    user: str = setting("", "etcd user to authenticate as (etcd with auth enabled), with a password.")
    password: str = setting(
        "", "The etcd user's password (prefer password_file: the environment leaks).", "secret"
    )
    password_file: str = setting("", "A file holding the etcd user's password, readable by its owner only.")
    start_wait: float = setting(
        60.0,
        "Seconds a starting master or node waits for etcd to answer (etcd started beside it, as a "
        "Kubernetes apply does) before it gives up with the error; 0: give up at once.",
    )

    def validate(self) -> None:
        if bool(self.cert) != bool(self.key):
            raise InvalidArgumentError("KVSTORE_ETCD_CERT and KVSTORE_ETCD_KEY go together: both or neither")
        if self.cert and not self.ca:
            raise InvalidArgumentError(
                "KVSTORE_ETCD_CERT is presented over TLS only: set KVSTORE_ETCD_CA (etcd's CA) too"
            )
        if not self.start_wait >= 0:  # (and not NaN)
            raise InvalidArgumentError(f"KVSTORE_ETCD_START_WAIT must be >= 0 seconds, got {self.start_wait}")
        if self.password and self.password_file:
            raise InvalidArgumentError(
                "KVSTORE_ETCD_PASSWORD and KVSTORE_ETCD_PASSWORD_FILE are both set: name the password once"
            )
        if bool(self.user) != bool(self.password or self.password_file):
            raise InvalidArgumentError(
                "KVSTORE_ETCD_USER goes with KVSTORE_ETCD_PASSWORD_FILE (or _PASSWORD): both or neither"
            )
        for name in ("ca", "cert", "key", "password_file"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise InvalidArgumentError(f"KVSTORE_ETCD_{name.upper()} names no file: {path}")
        for name in ("key", "password_file"):
            if getattr(self, name):
                _owner_only(f"KVSTORE_ETCD_{name.upper()}", Path(getattr(self, name)))

    def secure(self) -> bool:
        """TLS to etcd."""
        return bool(self.ca)

    def credentials(self) -> tuple[str, str] | None:
        """(user, password), or None when kvstore does not log in to etcd."""
        if not self.user:
            return None
        if self.password:
            return self.user, self.password
        try:
            password = Path(self.password_file).read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"KVSTORE_ETCD_PASSWORD_FILE={self.password_file}: {exc}") from exc
        if not password:
            raise InvalidArgumentError(f"KVSTORE_ETCD_PASSWORD_FILE={self.password_file} is empty")
        return self.user, password


def _owner_only(variable: str, path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionDeniedError(
            f"{variable}={path} is open to others (mode {stat.filemode(mode)}): chmod 600 {path}"
        )
