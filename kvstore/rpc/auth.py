"""The challenge-response that opens every master RPC connection, before any request is read:

    client -> master   MAGIC, client nonce (32 bytes)
    master -> client   master nonce (32), HMAC(secret, "master" + client nonce + master nonce)
    client -> master   HMAC(secret, "client" + master nonce + client nonce)
    master -> client   ACCEPTED (1 byte), or the connection closes (and the master logs the peer)

Each side proves it knows the cluster secret over a nonce the other chose, so nothing recorded on one
connection opens another, and the secret never crosses the wire. With no secret configured both sides use
the empty one: an insecure cluster (loopback only, unless insecure was chosen)."""

from __future__ import annotations

import os
import socket

from kvstore.errors import PermissionDeniedError
from transfer_engine.security import MAC_SIZE, NONCE_SIZE, mac, same

MAGIC = b"KVSAUTH1"
HELLO_SIZE = len(MAGIC) + NONCE_SIZE
CHALLENGE_SIZE = NONCE_SIZE + MAC_SIZE
ACCEPTED = b"\x01"
TIMEOUT_SECONDS = 5.0  # a peer that has not proved itself by then is cut off


def client_handshake(sock: socket.socket, secret: bytes, address: str) -> None:
    """Proves this side to the master at `address` and checks the master's proof (OSError / EOFError when
    the connection breaks; PermissionDeniedError when the secrets differ)."""
    nonce = os.urandom(NONCE_SIZE)
    sock.sendall(MAGIC + nonce)
    challenge = _recv_exact(sock, CHALLENGE_SIZE)
    theirs, proof = challenge[:NONCE_SIZE], challenge[NONCE_SIZE:]
    # (sent even to a master that failed its proof: it then refuses this side too, and logs who came)
    sock.sendall(mac(secret, b"client", theirs, nonce))
    if not same(proof, mac(secret, b"master", nonce, theirs)):
        if not secret:  # (the usual slip: a process started without the cluster's secret)
            raise PermissionDeniedError(
                f"master {address} has a cluster secret and this process none: set "
                "KVSTORE_CLUSTER_SECRET_FILE (or KVSTORE_CLUSTER_SECRET) as for the rest of the cluster"
            )
        raise PermissionDeniedError(
            f"master {address} does not share this cluster secret (KVSTORE_CLUSTER_SECRET / _FILE)"
        )
    try:
        accepted = _recv_exact(sock, 1) == ACCEPTED
    except EOFError:
        accepted = False
    if not accepted:
        raise PermissionDeniedError(f"master {address} refused this process's cluster secret")


class ServerHandshake:
    """The master's side, fed the bytes of one connection as they arrive."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.nonce = os.urandom(NONCE_SIZE)
        self.theirs = b""
        self.buffer = bytearray()
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """What to send back (once `done`, rest() has what came after the proof). Raises
        PermissionDeniedError for a peer that does not speak it or does not know the secret."""
        self.buffer += data
        if not self.theirs:
            if len(self.buffer) < HELLO_SIZE:
                if not MAGIC.startswith(bytes(self.buffer[: len(MAGIC)])):
                    raise PermissionDeniedError("not a kvstore client (no authentication hello)")
                return b""
            if bytes(self.buffer[: len(MAGIC)]) != MAGIC:
                raise PermissionDeniedError("not a kvstore client (no authentication hello)")
            self.theirs = bytes(self.buffer[len(MAGIC) : HELLO_SIZE])
            del self.buffer[:HELLO_SIZE]
            challenge = self.nonce + mac(self.secret, b"master", self.theirs, self.nonce)
            return challenge + self._proof_reply()
        return self._proof_reply()

    def _proof_reply(self) -> bytes:
        if self.done or len(self.buffer) < MAC_SIZE:
            return b""
        proof = bytes(self.buffer[:MAC_SIZE])
        if not same(proof, mac(self.secret, b"client", self.nonce, self.theirs)):
            raise PermissionDeniedError("wrong cluster secret")
        del self.buffer[:MAC_SIZE]
        self.done = True
        return ACCEPTED

    def rest(self) -> bytes:
        """What arrived after the proof (frames the client sent at once)."""
        rest, self.buffer = bytes(self.buffer), bytearray()
        return rest


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("connection closed during authentication")
        out += chunk
    return bytes(out)
