"""Who may do what beyond their own objects: a registered client becomes an admin by proving the admin
secret over a fresh nonce of the master's (kvstore.rpc.admin); the role lasts as long as that
registration (a client dropped, or a master restarted, proves it again)."""

from __future__ import annotations

import hmac
import secrets

from kvstore.errors import PermissionDeniedError
from kvstore.master.service.state_core import StateCore
from kvstore.rpc import admin


class Roles(StateCore):
    def admin_challenge(self, client_id: str) -> str:
        """A fresh nonce for this registered client to prove the admin secret over (replaces the last)."""
        self._client(client_id)
        nonce = self._admin_nonces[client_id] = secrets.token_hex(32)
        return nonce

    def admin_prove(self, client_id: str, proof: str, secret: bytes) -> None:
        """Makes the client an admin if `proof` is admin.proof(secret, client_id, its nonce). The nonce
        is spent either way (one guess per round trip, never a replay); PermissionDeniedError when the
        master has no admin secret, no nonce was asked for, or the proof is wrong."""
        self._client(client_id)
        nonce = self._admin_nonces.pop(client_id, None)
        if not secret:
            raise PermissionDeniedError(
                "this master has no admin secret (KVSTORE_MASTER_ADMIN_SECRET_FILE): nobody is an admin"
            )
        if nonce is None:
            raise PermissionDeniedError("no admin challenge to answer: ask for one first")
        if not hmac.compare_digest(admin.proof(secret, client_id, nonce), proof):
            raise PermissionDeniedError("wrong admin secret")
        self.admins.add(client_id)
