"""One engine batch of a client call: one row per request, each owned by the key it moves, turned into the
engine's flat columns at once, run with this thread helping to move bytes, and each key's outcome
reported (a read's verified by the engine as its bytes landed, where it could)."""

from __future__ import annotations

import array
import itertools
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from kvstore.errors import StaleLocationError, TransferConnectionError
from transfer_engine import BatchHandle, Op, Peer, ReadCheck, RequestState, TransferEngine

OK = 0
STALE = StaleLocationError.code
MAX_REQUEST_PIECES = 65536  # the engine's bound on one request's pieces (kMaxRequestPieces)
_READ = int(Op.READ)
_DTYPES = {"B": np.uint8, "I": np.uint32, "Q": np.uint64}
# wait_verified's verdict of a key alone in its request -> what stream() reports of its bytes
_VERIFIED = {int(ReadCheck.VERIFIED): True, int(ReadCheck.MISMATCH): False, int(ReadCheck.UNCHECKED): None}


def column_of(typecode: str, values: Sequence[int]) -> np.ndarray | Sequence[int]:
    """A column as an array through array.array (twice as fast as numpy from a tuple of ints); as it is
    where a value does not fit (the engine's submit says which)."""
    try:
        return np.frombuffer(array.array(typecode, values), _DTYPES[typecode])
    except (OverflowError, TypeError):
        return values


def _total(lengths: Sequence[int] | np.ndarray) -> int:
    # (numpy's sum of a small array costs several times a Python sum of its ints)
    return sum(lengths.tolist() if isinstance(lengths, np.ndarray) else lengths)


def joined(columns: list[Sequence[int] | np.ndarray]) -> np.ndarray | list[int]:
    """Requests' piece columns as one: arrays joined as arrays, lists in C loops."""
    if any(isinstance(c, np.ndarray) for c in columns):
        return np.concatenate(columns).astype(np.uint64, copy=False)
    return list(itertools.chain.from_iterable(columns))


# One request: (owner: the key, by its index in the caller's call, whose bytes it moves; op; peer; region;
# offset; fence slot; fence generation; local address, 0 when it has pieces of its own; length; how many of
# the batch's pieces, in order, are its own, or 0). A plain tuple: a named one is built in Python.
Request = tuple[int, int, Peer, int, int, int, int, int, int, int]


class TransferBatch:
    """The requests of one engine batch; a key's requests are added together (contiguous)."""

    def __init__(self) -> None:
        # (A row per request, appended once: a key's dozen column appends cost more than its copy.)
        self.requests: list[Request] = []
        # every multi-piece request's piece columns, in order (lists, or arrays: joined once at submit)
        self.piece_addrs: list[Sequence[int] | np.ndarray] = []
        self.piece_lengths: list[Sequence[int] | np.ndarray] = []
        self.failed: set[int] = set()
        self.failed_peers: set[str] = set()  # peers a request failed to reach (not: refused as stale)

    def add_pieces(
        self,
        owner: int,
        op: Op,
        addrs: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | np.ndarray,
        peer: Peer,
        region: int,
        offset: int,
        slot: int,
        gen: int,
    ) -> None:
        """The local pieces, in order, against consecutive bytes of the remote allocation from `offset` on:
        one request (that gathers or scatters them), and a read asks for the digest of what it lands."""
        n = len(lengths)
        if n == 1:
            request = (owner, op, peer, region, offset, slot, gen, int(addrs[0]), int(lengths[0]), 0)
            self.requests.append(request)
            return
        if n == 0:
            return
        if n > MAX_REQUEST_PIECES:  # (a request of its own per piece)
            for k in range(0, n, MAX_REQUEST_PIECES):
                part = slice(k, k + MAX_REQUEST_PIECES)
                self.add_pieces(owner, op, addrs[part], lengths[part], peer, region, offset, slot, gen)
                offset += _total(lengths[part])
            return
        self.requests.append((owner, op, peer, region, offset, slot, gen, 0, _total(lengths), n))
        self.piece_addrs.append(addrs)
        self.piece_lengths.append(lengths)

    def fail(self, owner: int, peer: str) -> None:
        """`owner` fails without a request: its peer `peer` cannot be opened."""
        self.failed.add(owner)
        self.failed_peers.add(peer)

    def _submit(
        self, engine: TransferEngine, timeout: float | None = None
    ) -> tuple[BatchHandle, tuple[tuple[int, ...], ...]]:
        """Submits every request (`timeout`: seconds until those not done end TIMED_OUT; None: the
        engine's transfer_timeout); returns the handle and the requests' columns (owner first)."""
        columns = tuple(zip(*self.requests, strict=True))
        _owner, ops, peers, regions, offsets, slots, gens, local, lengths, counts = columns
        op_column = column_of("B", ops)
        reads = np.asarray(op_column) == _READ
        handle = engine.submit(
            op_column,
            column_of("Q", local),
            column_of("I", [p.handle for p in peers]),
            column_of("Q", regions),
            column_of("Q", offsets),
            column_of("Q", lengths),
            timeout=timeout,
            fence_slots=column_of("I", slots),
            fence_gens=column_of("Q", gens),
            digests=reads if reads.any() else None,
            pieces=(
                (column_of("I", counts), joined(self.piece_addrs), joined(self.piece_lengths))
                if self.piece_addrs
                else None
            ),
        )
        return handle, columns

    def _failed(self, j: int, code: int) -> None:
        owner, _op, peer = self.requests[j][:3]
        self.failed.add(owner)
        if code != STALE:
            self.failed_peers.add(peer.name)

    def stream(
        self, engine: TransferEngine, expected: Mapping[int, int], timeout: float | None = None
    ) -> Iterator[tuple[int, int, bool | None]]:
        """Runs the batch of reads, yielding (owner, 0 or the error code of one of its failed requests,
        whether its bytes hash to expected[owner]) per owner. The engine verifies each read as it lands
        (this thread helping to move bytes, in one call); None where it could not (an owner of several
        requests, GPU memory): the caller hashes those. `timeout` as for _submit: a request not done by
        then yields the engine's timed-out code, and no byte of it lands after this returns."""
        for owner in self.failed:
            yield owner, TransferConnectionError.code, None
        if not self.requests:
            return
        if len(self.requests) == 1 and not self.piece_addrs:  # one read: the single-call path
            owner, _op, peer, region, offset, slot, gen, local, length, _n = self.requests[0]
            verdict = engine.read_one_verified(
                local, peer, region, offset, length, expected[owner], timeout=timeout, fence=(slot, gen)
            )
            if verdict > 0:
                self._failed(0, verdict)
                yield owner, verdict, None
            else:
                yield owner, OK, _VERIFIED[verdict]
            return
        handle, columns = self._submit(engine, timeout)
        owners = columns[0]
        owner_ids = np.asarray(owners)
        # An owner's requests are contiguous: owner k covers [starts[k], ends[k]).
        starts = np.flatnonzero(np.r_[True, owner_ids[1:] != owner_ids[:-1]])
        ends = np.r_[starts[1:], owner_ids.size]
        alone = ends - starts == 1  # an owner of one request: that request's digest is the key's
        check = np.repeat(alone, ends - starts).astype(np.uint8)
        verdicts = handle.wait_verified(np.asarray([expected[o] for o in owners], np.uint64), check)
        codes = np.maximum.reduceat(verdicts, starts)  # > 0: the error code of a failed request
        keyed = np.where(alone & (codes <= 0), verdicts[starts], int(ReadCheck.UNCHECKED))
        yield from zip(
            owner_ids[starts].tolist(),
            np.maximum(codes, OK).tolist(),
            map(_VERIFIED.__getitem__, keyed.tolist()),
            strict=True,
        )

    def run(self, engine: TransferEngine) -> set[int]:
        """Runs the batch (this thread helps move bytes); returns the owners with a request not completed."""
        if len(self.requests) == 1 and not self.piece_addrs:  # one request: the single-call path, no arrays
            _owner, op, peer, region, offset, slot, gen, local, length, _n = self.requests[0]
            state, code = engine.transfer_one(op, local, peer, region, offset, length, fence=(slot, gen))
            if state != RequestState.COMPLETED:
                self._failed(0, code)
        elif self.requests:
            handle, _ = self._submit(engine)
            handle.wait()
            errors = handle.errors()
            for j in np.flatnonzero(handle.states() != RequestState.COMPLETED).tolist():
                self._failed(j, int(errors[j]))
        return self.failed
