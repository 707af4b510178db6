"""The usual batch read as column operations: every key found at one served location, its value raw
memory in long-lived registrations (one piece that holds it, or pieces of exactly its size), and no
engine to avoid. The engine's request columns are taken from the located entries with C-level maps (a
loop step per key was most of a small read's time, and delayed the copies a batch of large values waits
for). It is the first round of kvstore.client.read_batch.ReadBatch: any other batch, and any read that
does not verify, goes through that batch's rounds over every replica."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvstore.client.buffers import ValueBuffers, read_columns
from kvstore.client.fields import (
    checksum_of,
    engine_of,
    first,
    gen_of,
    locations_of,
    offset_of,
    region_of,
    size_of,
    slot_of,
)
from kvstore.client.transfer_batch import column_of
from transfer_engine import Op, Peer, TransferEngine

_READ = [int(Op.READ)]  # (one value: the engine repeats it for every request)


@dataclass(slots=True)
class ReadPlan:
    """One read per key, in key order."""

    sizes: list[int]  # bytes of each object (what its read moves)
    expected: list[int]  # each object's checksum
    local: list[int]  # each value's one piece, or 0 where its pieces are given below
    peers: list[int]  # engine peer handles
    regions: list[int]
    offsets: list[int]
    slots: list[int]
    gens: list[int]
    pieces: tuple[Any, Any, Any] | None = None  # (per key its piece count, addresses, lengths)


def plan(
    found: list[Any], values: Sequence[ValueBuffers], peer_of: Callable[[str], Peer | None], avoid: set[str]
) -> ReadPlan | None:
    """The batch's reads when it is the usual case (see the module's doc), else None. Values of several
    pieces (a paged cache's) are read whole: each must be exactly its object's size."""
    if len(found) < 2 or avoid or None in found:
        return None
    places = list(map(locations_of, found))
    if set(map(len, places)) != {1}:
        return None
    sizes = list(map(size_of, found))
    columns = read_columns(values, sizes)
    if columns is None:
        return None
    local, pieces = columns
    locations = list(map(first, places))
    engines = list(map(engine_of, locations))
    handles: dict[str, int] = {}
    for name in set(engines):
        peer = peer_of(name) if name else None  # ("": a disk record only)
        if peer is None:
            return None
        handles[name] = peer.handle
    return ReadPlan(
        sizes,
        list(map(checksum_of, found)),
        local,
        list(map(handles.__getitem__, engines)),
        list(map(region_of, locations)),
        list(map(offset_of, locations)),
        list(map(slot_of, locations)),
        list(map(gen_of, locations)),
        pieces,
    )


def _counts(counts: Any) -> Any:
    return counts.astype(np.uint32) if isinstance(counts, np.ndarray) else column_of("I", counts)


def run(reads: ReadPlan, engine: TransferEngine, timeout: float | None = None) -> list[int]:
    """Runs the reads (this thread helping to move bytes), each verified as it lands: per key 0 when its
    bytes hash to its checksum, else its ReadCheck verdict (< 0) or error code (> 0: the engine's
    timed-out code for a read not done within `timeout` seconds; None: the engine's transfer_timeout)."""
    pieces = reads.pieces
    handle = engine.submit(
        _READ,
        column_of("Q", reads.local),
        column_of("I", reads.peers),
        column_of("Q", reads.regions),
        column_of("Q", reads.offsets),
        column_of("Q", reads.sizes),
        timeout=timeout,
        fence_slots=column_of("I", reads.slots),
        fence_gens=column_of("Q", reads.gens),
        digests=[True],
        pieces=None if pieces is None else (_counts(pieces[0]), pieces[1], pieces[2]),
    )
    expected = np.asarray(column_of("Q", reads.expected), np.uint64)
    return list(handle.wait_verified(expected, np.ones(len(reads.sizes), np.uint8)).tolist())
