"""One master request's worth of a batch put, through its three steps: the put start (the master places
each key's replicas), the writes (the bytes go to every replica), and the put end (committed, or revoked
where the bytes did not reach every replica). The store runs the chunks of a batch in a pipeline: a
chunk's start and end are answered by the master while the client works on its neighbours."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import NamedTuple

from kvstore.client.buffers import ValueBuffers, checksums
from kvstore.client.transfer_batch import OK, TransferBatch
from kvstore.errors import InvalidArgumentError, TransferConnectionError
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v
from transfer_engine import Op, Peer, TransferEngine


class PutResult(NamedTuple):
    """One key's outcome of a put: `code` 0 or a negative error code; `replicas` written by this put (0
    when the same bytes were already stored, or on failure) of `asked`."""

    code: int
    replicas: int
    asked: int
    message: str

    @property
    def degraded(self) -> bool:
        """Stored with fewer replicas than asked (too few distinct usable segments; see min_replicas)."""
        return self.code == 0 and 0 < self.replicas < self.asked


class PutChunk:
    def __init__(
        self, keys: list[str], values: Sequence[ValueBuffers], replicas: int, pin: bool, least: int
    ) -> None:
        self.keys, self.values, self.replicas, self.pin, self.least = keys, values, replicas, pin, least
        n = len(keys)
        self.codes = [OK] * n  # per key 0 or a negative error code
        self.messages = [""] * n
        self.written = [0] * n  # replicas this put wrote
        self.done: list[int] = []  # keys whose bytes reached every replica: to commit
        self.undone: list[int] = []  # keys placed whose bytes did not: to revoke
        self.asked: list[int] = []  # keys the master is asked about (start(): a bad key fails alone)

    def start(self, client_id: str) -> m.PutStart | None:
        """The put start of the chunk's keys (None when none is worth asking: a bad key fails alone)."""
        keys, values = self.keys, self.values
        self.asked = list(range(len(keys)))
        if not v.all_keys_ok(keys):
            self.asked = [i for i in self.asked if v.key_ok(keys[i])]
            for i in set(range(len(keys))) - set(self.asked):
                self.codes[i], self.messages[i] = -InvalidArgumentError.code, v.KEY_RULE
        if not self.asked:
            return None
        sizes = [values[i].size for i in self.asked]
        digests = checksums([values[i] for i in self.asked], sizes)
        items = list(map(m.PutItem, [keys[i] for i in self.asked], sizes, digests))
        return m.PutStart(
            client_id=client_id, items=items, replicas=self.replicas, pin=self.pin, min_replicas=self.least
        )

    def write(
        self, started: list[m.ItemResult], engine: TransferEngine, peer_of: Callable[[str], Peer | None]
    ) -> set[str]:
        """Writes each placed key's bytes to its replicas; returns the peers that could not be reached."""
        requests = TransferBatch()
        writing: list[int] = []
        peers: dict[str, Peer | None] = {}  # (one lookup per engine, not per replica)
        values, codes, messages, written = self.values, self.codes, self.messages, self.written
        for i, (code, message, placed) in zip(self.asked, started, strict=True):
            if code:
                codes[i], messages[i] = -code, message
            elif placed is not None:
                writing.append(i)
                written[i] = len(placed)
                for name, region_id, offset, slot, gen in placed:
                    if name not in peers:
                        peers[name] = peer_of(name)
                    peer = peers[name]
                    if peer is None:
                        requests.fail(i, name)
                        continue
                    addrs, lengths = values[i].pieces(values[i].size)
                    requests.add_pieces(i, Op.WRITE, addrs, lengths, peer, region_id, offset, slot, gen)
        failed = requests.run(engine)
        self.done = [i for i in writing if i not in failed]
        self.undone = [i for i in writing if i in failed]
        for i in self.undone:
            written[i] = 0
            codes[i] = -TransferConnectionError.code
            messages[i] = "the bytes did not reach every replica"
        return requests.failed_peers

    def end(self, client_id: str) -> tuple[m.PutRevoke | None, m.PutEnd | None]:
        """The requests that free the keys whose bytes did not reach every replica, and commit the rest."""
        keys, undone, done = self.keys, self.undone, self.done
        revoke = m.PutRevoke(client_id=client_id, keys=[keys[i] for i in undone]) if undone else None
        return revoke, m.PutEnd(client_id=client_id, keys=[keys[i] for i in done]) if done else None

    def ended(self, replies: list[m.ItemResult]) -> None:
        """The put end's reply: a key it failed for is not stored."""
        for i, (code, message, _none) in zip(self.done, replies, strict=True):
            if code:
                self.codes[i], self.messages[i], self.written[i] = -code, message, 0

    def results(self) -> list[PutResult]:
        return list(map(PutResult, self.codes, self.written, itertools.repeat(self.replicas), self.messages))

    def degraded(self) -> int:
        """Keys stored with fewer replicas than asked."""
        asked = self.replicas
        return sum(1 for r, n in zip(self.codes, self.written, strict=True) if r == OK and 0 < n < asked)
