"""How a storage node proves its key without sending it: the key (kvstore.node.node_key, 128 random
bits) seeds an Ed25519 key pair (the same pair at every start), whose public half the node's identity
names (kvstore.rpc.messages.node_key_fingerprint). A registration that names the identity carries the
public half and a signature over a fresh nonce of the master's, the client id and the identity, so what
crosses the wire lets nobody sign another registration, nor replay this one to a later master or after
the nonce was spent. The curve arithmetic is the `cryptography` package's (OpenSSL): tens of
microseconds to sign or check, nothing written here."""

from __future__ import annotations

import functools
import hashlib
from typing import TYPE_CHECKING

from kvstore.errors import InvalidArgumentError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_LABEL = b"kvstore-node-proof-v2\0"
_PUBLIC_BYTES, _SIGNATURE_BYTES = 32, 64
MAX_PUBLIC_CHARS = 2 * _SIGNATURE_BYTES  # the longest hex field of a proof (public half, signature, nonce)


@functools.lru_cache(maxsize=8)
def _private(node_key: str) -> Ed25519PrivateKey:
    # (imported here: only nodes and the master's registration check need the curve)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(_LABEL + node_key.encode()).digest())


def public_of(node_key: str) -> str:
    """The public half of the node key's pair (hex): what the identity's fingerprint names."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return _private(node_key).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def sign(node_key: str, message: bytes) -> str:
    return _private(node_key).sign(_LABEL + message).hex()


def verify(public: str, message: bytes, signature: str) -> bool:
    """True when `signature` is the pair's (whose public half is `public`) over `message`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        raw_public, raw_signature = bytes.fromhex(public), bytes.fromhex(signature)
    except ValueError:
        return False
    if len(raw_public) != _PUBLIC_BYTES or len(raw_signature) != _SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw_public).verify(raw_signature, _LABEL + message)
    except (InvalidSignature, ValueError):
        return False
    return True


def message(nonce: str, client_id: str, node_id: str) -> bytes:
    """What a registration signs: the master's nonce, the registering client and the identity."""
    for part in (nonce, client_id, node_id):
        if "\0" in part:
            raise InvalidArgumentError("a NUL in a node proof's field")
    return b"\0".join(x.encode() for x in (nonce, client_id, node_id))
