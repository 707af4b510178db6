"""The cluster secret: every kvstore process of a cluster proves it knows it when it connects to another
(challenge-response over nonces from both sides; the secret never crosses the wire). Without one, a
process listens on loopback only, unless told it may be reached insecurely.

    KVSTORE_CLUSTER_SECRET        the secret itself
    KVSTORE_CLUSTER_SECRET_FILE   a file holding it (readable by its owner only; `kvstore secret new`)
    KVSTORE_INSECURE=1            listen beyond loopback with no secret (said at start and in status)

This is what an engine itself needs (EngineSecurity): an engine-only process, such as the target of
`python -m transfer_engine.bench`, still refuses a weak secret. The cluster's settings around it (TLS for
the master RPC: kvstore.config.security.SecurityConfig, the "security" section), writing a new secret
file (kvstore.config.secret_file) and the master RPC's proof of the secret (kvstore.rpc.auth) are
kvstore's: the engine proves the secret in C++.
"""

from __future__ import annotations

import ipaddress
import stat
from dataclasses import dataclass
from pathlib import Path

from transfer_engine.errors import InvalidArgumentError, PermissionDeniedError
from transfer_engine.settings import Settings, setting

MIN_SECRET_BITS = 128
MIN_DISTINCT_CHARS = 8  # (32 random hex digits have fewer with odds of 3.5e-8; 22 base64 ones, 3.5e-13)
_HEX = frozenset("0123456789abcdefABCDEF")
_BASE64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")


@dataclass
class EngineSecurity(Settings):
    """Who may connect to an engine: the cluster secret, or an explicit choice to run without one."""

    cluster_secret: str = setting(
        "", "The cluster secret (prefer cluster_secret_file: the environment leaks).", "secret"
    )
    cluster_secret_file: str = setting("", "A file holding the cluster secret, readable by its owner only.")
    insecure: bool = setting(
        False, "Listen beyond loopback with no cluster secret: anyone who reaches a port may use it."
    )

    def validate(self) -> None:
        super().validate()
        if self.cluster_secret and self.cluster_secret_file:
            raise InvalidArgumentError(
                "KVSTORE_CLUSTER_SECRET and KVSTORE_CLUSTER_SECRET_FILE are both set: name the secret once"
            )
        self.check_added_settings()
        if self.cluster_secret:
            check_strength(self.cluster_secret, "KVSTORE_CLUSTER_SECRET")

    def check_added_settings(self) -> None:
        """A subclass's checks of the settings it adds (kvstore's TLS files). They run between the two
        checks of the secret so that a config with several faults names the same one first as when the
        cluster's settings were one class here."""

    def secret(self) -> bytes:
        """The secret's bytes; b"" when none is configured."""
        self.validate()
        if self.cluster_secret:
            return self.cluster_secret.encode()
        if not self.cluster_secret_file:
            return b""
        return read_secret_file(Path(self.cluster_secret_file))

    def check_listen(self, host: str, what: str) -> None:
        """Refuses to serve on `host` beyond loopback with no secret, unless insecure is chosen."""
        if self.secret() or self.insecure or is_loopback(host):
            return
        raise PermissionDeniedError(
            f"{what} would listen on {host} with no cluster secret, so anyone who reaches it could use "
            "it: set KVSTORE_CLUSTER_SECRET_FILE (`kvstore secret new`), or allow it with "
            "KVSTORE_INSECURE=1 / --insecure"
        )


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or "localhost" ("" and 0.0.0.0 are every address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_secret_file(path: Path) -> bytes:
    try:
        info = path.stat()
        text = path.read_text().strip()
    except OSError as exc:
        raise InvalidArgumentError(f"KVSTORE_CLUSTER_SECRET_FILE={path}: {exc.strerror or exc}") from exc
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionDeniedError(
            f"KVSTORE_CLUSTER_SECRET_FILE={path} is readable by others (mode {stat.filemode(info.st_mode)}): "
            f"chmod 600 {path}"
        )
    check_strength(text, f"KVSTORE_CLUSTER_SECRET_FILE={path}")
    return text.encode()


def check_strength(secret: str, where: str) -> None:
    """Refuses a secret with less than MIN_SECRET_BITS of entropy, as far as its text can tell: it must be
    what a generator writes, hex (4 bits a digit: 32 digits at least) or base64 (6 bits a character: 22
    at least, '=' padding not counted), with at least MIN_DISTINCT_CHARS distinct characters. No rule on
    text can tell chosen words from random ones (a long base64-looking phrase passes): make it with
    `kvstore secret new` (256 bits), `openssl rand -hex 32` or `openssl rand -base64 32`."""
    body = secret.rstrip("=")
    chars = set(body)
    how = "make one with `kvstore secret new` (or `openssl rand -hex 32`)"
    if chars <= _HEX:
        bits = 4 * len(body)
    elif chars <= _BASE64:
        bits = 6 * len(body)
    else:
        raise InvalidArgumentError(
            f"{where}: a cluster secret must be random hex or base64 (it holds other characters, as a "
            f"chosen password does, which can be guessed): {how}"
        )
    if bits < MIN_SECRET_BITS:
        raise InvalidArgumentError(
            f"{where}: a cluster secret needs at least {MIN_SECRET_BITS} random bits (32 hex digits or 22 "
            f"base64 characters); this one has at most {bits}: {how}"
        )
    if len(chars) < MIN_DISTINCT_CHARS:
        raise InvalidArgumentError(
            f"{where}: a cluster secret of {len(chars)} distinct characters is not random: {how}"
        )
