"""How a storage node proves its key without sending it: the key (kvstore.node.node_key, 128 random
bits) seeds an RSA key pair (2048 bits, e = 65537) made from it the same way at every start, whose
public half the node's identity names (kvstore.rpc.messages.node_key_fingerprint). A registration that
names the identity carries the public half and a signature (full-domain hash) over a fresh nonce of the
master's, the client id and the identity, so what crosses the wire lets nobody sign another
registration, nor replay this one to a later master or after the nonce was spent.

Checking costs the master one exponentiation by 65537 (about 0.1 ms); the node spends a fraction of a
second once per process making the pair, and one private exponentiation per registration."""

from __future__ import annotations

import functools
import hashlib
import math

from kvstore.errors import InvalidArgumentError

_E = 65537
_BITS = 2048
_LABEL = b"kvstore-node-proof-v1\0"
_SMALL_PRIMES = [p for p in range(3, 2000, 2) if all(p % d for d in range(3, math.isqrt(p) + 1, 2))]
MAX_PUBLIC_CHARS = 2 * _BITS // 8  # hex
_ROUNDS = 8  # Miller-Rabin rounds (FIPS 186-4 asks 5 for 1024-bit primes); bases from the seed


class _Stream:
    """Deterministic bytes from a seed (SHA-512 in counter mode)."""

    def __init__(self, seed: bytes) -> None:
        self._seed = seed
        self._counter = 0

    def take(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            self._counter += 1
            out += hashlib.sha512(self._seed + self._counter.to_bytes(8, "big")).digest()
        return out[:n]

    def below(self, bound: int) -> int:
        return int.from_bytes(self.take((bound.bit_length() + 71) // 8), "big") % bound


def _probably_prime(n: int, stream: _Stream) -> bool:
    if any(n % p == 0 for p in _SMALL_PRIMES):
        return n in _SMALL_PRIMES
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for _ in range(_ROUNDS):
        x = pow(2 + stream.below(n - 3), d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime(stream: _Stream, bits: int) -> int:
    while True:
        candidate = int.from_bytes(stream.take(bits // 8), "big") | (3 << (bits - 2)) | 1
        if (candidate - 1) % _E and _probably_prime(candidate, stream):
            return candidate


@functools.lru_cache(maxsize=8)
def _pair(node_key: str) -> tuple[int, int]:
    """(n, d) of the node key's pair."""
    stream = _Stream(_LABEL + node_key.encode())
    while True:
        p, q = _prime(stream, _BITS // 2), _prime(stream, _BITS // 2)
        n = p * q
        if p != q and n.bit_length() == _BITS:
            return n, pow(_E, -1, math.lcm(p - 1, q - 1))


def public_of(node_key: str) -> str:
    """The public half of the node key's pair (hex): what the identity's fingerprint names."""
    return format(_pair(node_key)[0], "x")


def _digest(n: int, message: bytes) -> int:
    """The message hashed over the whole modulus (full-domain hash), below n."""
    stream = _Stream(_LABEL + n.to_bytes(_BITS // 8, "big") + message)
    return int.from_bytes(stream.take(_BITS // 8 + 16), "big") % n  # (128 bits more: next to uniform)


def sign(node_key: str, message: bytes) -> str:
    n, d = _pair(node_key)
    return format(pow(_digest(n, message), d, n), "x")


def verify(public: str, message: bytes, signature: str) -> bool:
    """True when `signature` is the pair's (whose public half is `public`) over `message`."""
    try:
        n, s = int(public, 16), int(signature, 16)
    except ValueError:
        return False
    if n.bit_length() != _BITS or n % 2 == 0 or not 0 < s < n:
        return False
    return pow(s, _E, n) == _digest(n, message)


def message(nonce: str, client_id: str, node_id: str) -> bytes:
    """What a registration signs: the master's nonce, the registering client and the identity."""
    for part in (nonce, client_id, node_id):
        if "\0" in part:
            raise InvalidArgumentError("a NUL in a node proof's field")
    return b"\0".join(x.encode() for x in (nonce, client_id, node_id))
