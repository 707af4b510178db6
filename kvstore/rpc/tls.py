"""TLS for the master RPC (optional; the cluster secret's challenge-response still runs inside it). A
master with KVSTORE_TLS_CERT/KEY serves TLS, and with KVSTORE_TLS_CA also requires client certificates
that CA signed (mTLS); a client with KVSTORE_TLS_CA speaks TLS and verifies the master's certificate
(its name or IP address as the client dials it), presenting its own KVSTORE_TLS_CERT/KEY if set. The
bulk data path is not encrypted (docs/operators/security.md: the trade-off)."""

from __future__ import annotations

import os
import ssl
import stat

from kvstore.config.security import SecurityConfig
from kvstore.errors import InvalidArgumentError, PermissionDeniedError


def server_context(security: SecurityConfig) -> ssl.SSLContext | None:
    """The master's TLS context; None when it has no certificate (plain TCP)."""
    security.validate()
    if not security.tls_cert:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    check_key_file(security.tls_key)
    context.load_cert_chain(security.tls_cert, security.tls_key)
    if security.tls_ca:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(security.tls_ca)
    return context


def client_context(security: SecurityConfig) -> ssl.SSLContext | None:
    """A client's TLS context; None when it has no CA to verify the master by (plain TCP)."""
    security.validate()
    if not security.tls_ca:
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=security.tls_ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if security.tls_cert:
        check_key_file(security.tls_key)
        context.load_cert_chain(security.tls_cert, security.tls_key)
    return context


def check_key_file(path: str) -> None:
    """Refuses a private key that users other than its owner may read or write (anyone who reads it can
    pose as this process): PermissionDeniedError naming the file and the fix."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InvalidArgumentError(f"KVSTORE_TLS_KEY={path}: {exc.strerror or exc}") from exc
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermissionDeniedError(
            f"KVSTORE_TLS_KEY={path} is open to other users (mode {stat.filemode(info.st_mode)}): "
            f"chmod 600 {path}"
        )


def describe(context: ssl.SSLContext | None) -> str:
    if context is None:
        return "off"
    return "on, client certificates required" if context.verify_mode == ssl.CERT_REQUIRED else "on"
