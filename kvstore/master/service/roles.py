"""Who may do what beyond their own objects: a registered client becomes an admin by proving the admin
secret over a fresh nonce of the master's (kvstore.rpc.admin); the role lasts as long as that
registration (a client dropped, or a master restarted, proves it again)."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable, Mapping

from kvstore.errors import PermissionDeniedError
from kvstore.master.ledger.model import Client
from kvstore.rpc import admin


class Roles:
    """The admins among the registered clients and the nonces they prove the secret over."""

    def __init__(self, clients: Mapping[str, Client], client: Callable[[str], Client]) -> None:
        """`clients`: the registered ones; `client(id)`: the registered client, or NotFoundError (both
        Membership's, which keeps the roles: kvstore.master.service.membership)."""
        self.clients = clients
        self._client = client
        self.admins: set[str] = set()  # registrations that proved the admin secret
        self._nonces: dict[str, str] = {}  # client -> the nonce it was given to prove it over

    def check_admin(self, client_id: str, what: str) -> None:
        """PermissionDeniedError unless the client proved the admin secret."""
        if client_id not in self.admins or client_id not in self.clients:
            raise PermissionDeniedError(
                f"{what} needs an admin: the caller must hold the admin secret the master has "
                "(KVSTORE_ADMIN_SECRET_FILE for a client, KVSTORE_MASTER_ADMIN_SECRET_FILE for the master)"
            )

    def forget(self, client_id: str) -> None:
        """The registration is dropped: its role and its nonce go with it."""
        self.admins.discard(client_id)
        self._nonces.pop(client_id, None)

    def admin_challenge(self, client_id: str) -> str:
        """A fresh nonce for this registered client to prove the admin secret over (replaces the last)."""
        self._client(client_id)
        nonce = self._nonces[client_id] = secrets.token_hex(32)
        return nonce

    def admin_prove(self, client_id: str, proof: str, secret: bytes) -> None:
        """Makes the client an admin if `proof` is admin.proof(secret, client_id, its nonce). The nonce
        is spent either way (one guess per round trip, never a replay); PermissionDeniedError when the
        master has no admin secret, no nonce was asked for, or the proof is wrong."""
        self._client(client_id)
        nonce = self._nonces.pop(client_id, None)
        if not secret:
            raise PermissionDeniedError(
                "this master has no admin secret (KVSTORE_MASTER_ADMIN_SECRET_FILE): nobody is an admin"
            )
        if nonce is None:
            raise PermissionDeniedError("no admin challenge to answer: ask for one first")
        if not hmac.compare_digest(admin.proof(secret, client_id, nonce), proof):
            raise PermissionDeniedError("wrong admin secret")
        self.admins.add(client_id)
