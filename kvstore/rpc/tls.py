"""TLS for the master RPC (optional; the cluster secret's challenge-response still runs inside it). A
master with KVSTORE_TLS_CERT/KEY serves TLS, and with KVSTORE_TLS_CA also requires client certificates
that CA signed (mTLS); a client with KVSTORE_TLS_CA speaks TLS and verifies the master's certificate
(its name or IP address as the client dials it), presenting its own KVSTORE_TLS_CERT/KEY if set. The
bulk data path is not encrypted (README: the trade-off)."""

from __future__ import annotations

import ssl

from transfer_engine.security import SecurityConfig


def server_context(security: SecurityConfig) -> ssl.SSLContext | None:
    """The master's TLS context; None when it has no certificate (plain TCP)."""
    security.validate()
    if not security.tls_cert:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
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
        context.load_cert_chain(security.tls_cert, security.tls_key)
    return context


def describe(context: ssl.SSLContext | None) -> str:
    if context is None:
        return "off"
    return "on, client certificates required" if context.verify_mode == ssl.CERT_REQUIRED else "on"
