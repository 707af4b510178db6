"""The nonces a storage node signs its registration over (kvstore.rpc.node_proof): made by this master
(MACed with a key of its own, so no other master's and no made-up one passes), good for NONCE_SECONDS,
and each node identity's registrations must use ever newer ones. A registration a relay or sniffer
captured can thus be replayed neither to a later master, nor after the node registered again, nor
late: what crosses the wire lets nobody take the identity."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

from kvstore.errors import PermissionDeniedError

NONCE_SECONDS = 30.0  # a nonce's life: a node asks for one and registers at once
MAX_REMEMBERED = 65536  # identities whose newest spent nonce is kept (each for NONCE_SECONDS at most)


class NodeNonces:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = secrets.token_bytes(32)
        self._clock = clock
        self._issued = 0
        self._spent: dict[str, tuple[int, float]] = {}  # identity -> (newest number spent, when): by when

    def new(self) -> str:
        """A fresh nonce: its number, when it was made (ms), and this master's MAC over both (hex)."""
        self._issued += 1
        body = f"{self._issued:016x}{int(self._clock() * 1000) & (2**64 - 1):016x}"
        return body + self._mac(body)

    def spend(self, node_id: str, nonce: str) -> None:
        """PermissionDeniedError unless `nonce` is this master's, fresh, and newer than every nonce the
        identity registered with before."""
        body, mac = nonce[:32], nonce[32:]
        if len(nonce) != 64 or not hmac.compare_digest(self._mac(body), mac):
            raise PermissionDeniedError("the node's registration names no nonce of this master's")
        number, made = int(body[:16], 16), int(body[16:], 16) / 1000
        now = self._clock()
        if not 0 <= now - made <= NONCE_SECONDS:
            raise PermissionDeniedError("the node's registration names a stale nonce: ask for a new one")
        self._forget_before(now - NONCE_SECONDS)
        last = self._spent.pop(node_id, (0, 0.0))[0]
        if number <= last:
            self._spent[node_id] = (last, now)
            raise PermissionDeniedError(f"node {node_id!r} registered with this or a newer nonce already")
        self._spent[node_id] = (number, now)

    def _forget_before(self, oldest: float) -> None:
        """Entries older than a nonce's life guard nothing (every nonce they could refuse is stale); at
        MAX_REMEMBERED the oldest goes regardless."""
        for node_id, (_, when) in list(self._spent.items()):
            if when >= oldest and len(self._spent) < MAX_REMEMBERED:
                break
            del self._spent[node_id]

    def _mac(self, body: str) -> str:
        return hmac.new(self._key, body.encode(), hashlib.sha256).hexdigest()[:32]
