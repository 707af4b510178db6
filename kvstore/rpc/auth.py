"""The challenge-response that opens every master RPC connection, before any request is read:

    client -> master   MAGIC, client nonce (32 bytes)
    master -> client   master nonce (32)
    client -> master   HMAC(secret, "client" + master nonce + client nonce)
    master -> client   HMAC(secret, "master" + client nonce + master nonce), or the connection closes
                       (and the master logs the peer)

Each side proves it knows the cluster secret over a nonce the other chose, so nothing recorded on one
connection opens another, and the secret never crosses the wire. The side that accepts proves last: a
peer that has not proved the secret gets nothing computed from it (had the master proved first, one
connection would give anyone an offline oracle to test guesses of the secret against). With no secret
configured both sides use the empty one: an insecure cluster (loopback only, unless insecure was chosen).

With a secret, every frame after this carries a MAC keyed from the secret and both nonces (frame_mac),
unless the connection is TLS."""

from __future__ import annotations

import hashlib
import hmac
import os
import socket

from kvstore.errors import PermissionDeniedError
from kvstore.rpc.frame_mac import TAG_SIZE, FrameMac, FrameMacError

NONCE_SIZE = 32
MAC_SIZE = 32  # (HMAC-SHA256)
MAGIC = b"KVSAUTH2"  # 2: the master proves last, and frames carry MACs
OLDER_MAGICS = (b"KVSAUTH1",)  # (said in the refusal: a client older than this master)
HELLO_SIZE = len(MAGIC) + NONCE_SIZE
TIMEOUT_SECONDS = 5.0  # a peer that has not proved itself by then is cut off

__all__ = [
    "HELLO_SIZE",
    "MAC_SIZE",
    "MAGIC",
    "NONCE_SIZE",
    "TAG_SIZE",
    "TIMEOUT_SECONDS",
    "FrameMac",
    "FrameMacError",
    "ServerHandshake",
    "client_handshake",
]


def mac(secret: bytes, label: bytes, first: bytes, second: bytes) -> bytes:
    """HMAC-SHA256 of label + first + second: what one side proves over both sides' nonces."""
    return hmac.new(secret, label + first + second, hashlib.sha256).digest()


def same(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def client_handshake(
    sock: socket.socket, secret: bytes, address: str, frames: bool = True
) -> FrameMac | None:
    """Proves this side to the master at `address` and checks the master's proof (OSError / EOFError when
    the connection breaks; PermissionDeniedError when the secrets differ). Returns the connection's frame
    MACs: None with no secret, or when `frames` is False (a TLS connection)."""
    nonce = os.urandom(NONCE_SIZE)
    sock.sendall(MAGIC + nonce)
    theirs = _recv_exact(sock, NONCE_SIZE)
    sock.sendall(mac(secret, b"client", theirs, nonce))
    try:
        proof = _recv_exact(sock, MAC_SIZE)
    except (EOFError, ConnectionResetError):
        proof = b""  # it closed at our proof: it refused it
    if not proof:
        if not secret:  # (the usual slip: a process started without the cluster secret)
            raise PermissionDeniedError(
                f"master {address} has a cluster secret and this process none: set "
                "KVSTORE_CLUSTER_SECRET_FILE (or KVSTORE_CLUSTER_SECRET) as for the rest of the cluster"
            )
        raise PermissionDeniedError(
            f"master {address} refused this process's proof: it does not share this cluster secret "
            "(KVSTORE_CLUSTER_SECRET / _FILE)"
        )
    if not same(proof, mac(secret, b"master", nonce, theirs)):
        raise PermissionDeniedError(
            f"master {address} does not share this cluster secret (KVSTORE_CLUSTER_SECRET / _FILE)"
        )
    return _frame_mac(secret, nonce, theirs, client=True) if secret and frames else None


class ServerHandshake:
    """The master's side, fed the bytes of one connection as they arrive."""

    def __init__(self, secret: bytes, frames: bool = True) -> None:
        """`frames`: MAC the frames after it (with a secret; off for a TLS connection)."""
        self.secret, self.frames = secret, frames
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
                    _not_ours(bytes(self.buffer))
                return b""
            if bytes(self.buffer[: len(MAGIC)]) != MAGIC:
                _not_ours(bytes(self.buffer))
            self.theirs = bytes(self.buffer[len(MAGIC) : HELLO_SIZE])
            del self.buffer[:HELLO_SIZE]
            return self.nonce + self._proof_reply()
        return self._proof_reply()

    def _proof_reply(self) -> bytes:
        if self.done or len(self.buffer) < MAC_SIZE:
            return b""
        proof = bytes(self.buffer[:MAC_SIZE])
        if not same(proof, mac(self.secret, b"client", self.nonce, self.theirs)):
            raise PermissionDeniedError("wrong cluster secret")
        del self.buffer[:MAC_SIZE]
        self.done = True
        return mac(self.secret, b"master", self.theirs, self.nonce)  # (only now: it proved itself)

    def frame_mac(self) -> FrameMac | None:
        """The connection's frame MACs once done; None when frames go without (no secret, or TLS)."""
        if not (self.done and self.secret and self.frames):
            return None
        return _frame_mac(self.secret, self.theirs, self.nonce, client=False)

    def rest(self) -> bytes:
        """What arrived after the proof (frames the client sent at once)."""
        rest, self.buffer = bytes(self.buffer), bytearray()
        return rest


def _frame_mac(secret: bytes, client_nonce: bytes, master_nonce: bytes, client: bool) -> FrameMac:
    """One key per direction, from the secret and both nonces: a frame of one direction (or of another
    connection) never verifies in another."""
    to_master = mac(secret, b"frames to master", client_nonce, master_nonce)
    to_client = mac(secret, b"frames to client", client_nonce, master_nonce)
    return FrameMac(to_master, to_client) if client else FrameMac(to_client, to_master)


def _not_ours(start: bytes) -> None:
    if start[: len(MAGIC)] in OLDER_MAGICS:
        raise PermissionDeniedError("a kvstore client older than this master (authentication v1): upgrade it")
    raise PermissionDeniedError("not a kvstore client (no authentication hello)")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("connection closed during authentication")
        out += chunk
    return bytes(out)
