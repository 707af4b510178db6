"""The cluster's security settings (`kvstore config`'s "security" section): the cluster secret an engine
reads (transfer_engine.security.EngineSecurity: its settings, strength rule and listen check) and TLS for
the master RPC, which only kvstore speaks (kvstore.rpc.tls).

    KVSTORE_TLS_CERT, _KEY, _CA   a master with a certificate serves TLS; a client with a CA verifies the
                                  master against it (and presents its own certificate: mTLS)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvstore.errors import InvalidArgumentError
from transfer_engine.security import EngineSecurity
from transfer_engine.settings import setting


@dataclass
class SecurityConfig(EngineSecurity):
    """Who may connect: the cluster secret, or an explicit choice to run without one; TLS to the master."""

    tls_cert: str = setting(
        "", "PEM certificate (chain): a master serves its RPC over TLS with it; a client presents it (mTLS)."
    )
    tls_key: str = setting("", "PEM private key of tls_cert (readable by its owner only).")
    tls_ca: str = setting(
        "",
        "PEM CA bundle: a client speaks TLS to the master and verifies it against this; a master with a "
        "certificate also requires clients to present one it signed (mTLS).",
    )

    def check_added_settings(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise InvalidArgumentError("KVSTORE_TLS_CERT and KVSTORE_TLS_KEY go together: both or neither")
        for name in ("tls_cert", "tls_key", "tls_ca"):
            path = getattr(self, name)
            if path and not Path(path).is_file():
                raise InvalidArgumentError(f"KVSTORE_{name.upper()} names no file: {path}")
