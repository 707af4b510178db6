"""One engine batch of a client call: flat request columns, each request owned by the key it moves, run
with this thread helping to move bytes, and each key's outcome reported (a read's verified by the engine
as its bytes landed, where it could)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from kvstore.errors import StaleLocationError, TransferConnectionError
from transfer_engine import BatchHandle, Op, Peer, ReadCheck, RequestState, TransferEngine

OK = 0
STALE = StaleLocationError.code
MAX_REQUEST_PIECES = 65536  # the engine's bound on one request's pieces (kMaxRequestPieces)


class TransferBatch:
    """Flat arrays for one engine batch, with the key index of every request."""

    def __init__(self) -> None:
        self.owner: list[int] = []
        self.ops: list[int] = []
        self.local: list[int] = []
        self.regions: list[int] = []
        self.offsets: list[int] = []
        self.lengths: list[int] = []
        self.slots: list[int] = []
        self.gens: list[int] = []
        self.digests: list[int] = []  # 1: a read (its digest is its key's when it is the key's only one)
        self.piece_counts: list[int] = []  # per request: 0, or how many of the pieces below are its own
        self.piece_addrs: list[int] = []
        self.piece_lengths: list[int] = []
        self.failed: set[int] = set()
        self.failed_peers: set[str] = set()  # peers a request failed to reach (not: refused as stale)
        self.peers: list[Peer] = []

    def add_pieces(
        self,
        owner: int,
        op: Op,
        addrs: list[int],
        lengths: list[int],
        peer: Peer,
        region: int,
        offset: int,
        slot: int,
        gen: int,
    ) -> None:
        """The local pieces, in order, against consecutive bytes of the remote allocation from `offset` on:
        one request (that gathers or scatters them), and a read asks for the digest of what it lands."""
        n = len(lengths)
        if n == 0:
            return
        if n > MAX_REQUEST_PIECES:  # (a request of its own per piece)
            for k in range(0, n, MAX_REQUEST_PIECES):
                part = slice(k, k + MAX_REQUEST_PIECES)
                self.add_pieces(owner, op, addrs[part], lengths[part], peer, region, offset, slot, gen)
                offset += sum(lengths[part])
            return
        self.owner.append(owner)
        self.ops.append(op)
        self.peers.append(peer)
        self.regions.append(region)
        self.offsets.append(offset)
        self.slots.append(slot)
        self.gens.append(gen)
        self.digests.append(int(op == Op.READ))
        if n == 1:
            self.local.append(addrs[0])
            self.lengths.append(lengths[0])
            self.piece_counts.append(0)
        else:
            self.local.append(0)
            self.lengths.append(sum(lengths))
            self.piece_counts.append(n)
            self.piece_addrs += addrs
            self.piece_lengths += lengths

    def fail(self, owner: int, peer: str) -> None:
        """`owner` fails without a request: its peer `peer` cannot be opened."""
        self.failed.add(owner)
        self.failed_peers.add(peer)

    def _submit(self, engine: TransferEngine) -> BatchHandle:
        handles = [p.handle for p in self.peers]
        return engine.submit(
            self.ops,
            self.local,
            handles,
            self.regions,
            self.offsets,
            self.lengths,
            fence_slots=self.slots,
            fence_gens=self.gens,
            digests=self.digests if any(self.digests) else None,
            pieces=(self.piece_counts, self.piece_addrs, self.piece_lengths) if self.piece_addrs else None,
        )

    def _failed(self, j: int, code: int) -> None:
        self.failed.add(self.owner[j])
        if code != STALE:
            self.failed_peers.add(self.peers[j].name)

    def stream(
        self, engine: TransferEngine, expected: Mapping[int, int]
    ) -> Iterator[tuple[int, int, bool | None]]:
        """Runs the batch of reads, yielding (owner, 0 or the error code of one of its failed requests,
        whether its bytes hash to expected[owner]) per owner. The engine verifies each read as it lands
        (this thread helping to move bytes, in one call); None where it could not (an owner of several
        requests, GPU memory, the single-request path): the caller hashes those."""
        for owner in self.failed:
            yield owner, TransferConnectionError.code, None
        if len(self.owner) == 1 and not self.piece_addrs and self.digests[0]:  # one read: one call
            owner = self.owner[0]
            verdict = engine.read_one_verified(
                self.local[0],
                self.peers[0],
                self.regions[0],
                self.offsets[0],
                self.lengths[0],
                expected[owner],
                fence=(self.slots[0], self.gens[0]),
            )
            if verdict > 0:
                self._failed(0, verdict)
                yield owner, verdict, None
            else:
                yield owner, OK, None if verdict == ReadCheck.UNCHECKED else verdict == ReadCheck.VERIFIED
            return
        if len(self.owner) <= 1 and not self.piece_addrs:  # nothing to overlap: the single-call path
            already = set(self.failed)
            codes = self._run(engine)
            for owner in set(self.owner) - already:
                yield owner, codes.get(owner, OK), None
            return
        handle = self._submit(engine)
        # An owner's requests are contiguous: owner k covers [starts[k], ends[k]).
        owner_ids = np.asarray(self.owner)
        starts = np.flatnonzero(np.r_[True, owner_ids[1:] != owner_ids[:-1]])
        ends = np.r_[starts[1:], owner_ids.size]
        alone = ends - starts == 1  # an owner of one request: that request's digest is the key's
        check = np.asarray(self.digests, np.uint8)
        if not alone.all():
            check[np.repeat(~alone, ends - starts)] = 0
        verdicts = handle.wait_verified(np.asarray([expected[o] for o in self.owner], np.uint64), check)
        failed = np.maximum.reduceat(verdicts, starts)  # > 0: the error code of a failed request
        first = verdicts[starts]
        for owner, code, one, single in zip(
            owner_ids[starts].tolist(), failed.tolist(), first.tolist(), alone.tolist(), strict=True
        ):
            if code > 0:
                yield owner, code, None
            elif not single or one == ReadCheck.UNCHECKED:
                yield owner, OK, None
            else:
                yield owner, OK, one == ReadCheck.VERIFIED

    def run(self, engine: TransferEngine) -> set[int]:
        """Runs the batch (this thread helps move bytes); returns the owners with a request not completed."""
        self._run(engine)
        return self.failed

    def _run(self, engine: TransferEngine) -> dict[int, int]:
        """Runs the batch; returns the error code of a failed request per failed owner."""
        codes: dict[int, int] = {}
        if len(self.owner) == 1 and not self.piece_addrs:  # one request: the single-call path, no arrays
            state, code = engine.transfer_one(
                self.ops[0],
                self.local[0],
                self.peers[0],
                self.regions[0],
                self.offsets[0],
                self.lengths[0],
                fence=(self.slots[0], self.gens[0]),
            )
            if state != RequestState.COMPLETED:
                codes[self.owner[0]] = code or TransferConnectionError.code
                self._failed(0, code)
        elif self.owner:
            handle = self._submit(engine)
            handle.wait()
            bad = np.flatnonzero(handle.states() != RequestState.COMPLETED)
            errors = handle.errors()
            for j in bad.tolist():
                codes[self.owner[j]] = int(errors[j]) or TransferConnectionError.code
                self._failed(j, int(errors[j]))
        return codes
