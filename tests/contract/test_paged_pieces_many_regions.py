"""A paged read's pieces across many registrations, over every transport (the contract suite's pair).

A vLLM batch's values each take one piece from every layer's tensor, in the same layer order value after
value: the engine finds each piece's registration from the one before it (the next one pinned), and
these tests hold that shortcut to the rules a lookup has: a piece is served only by a registration that
holds all of it, a read never lands in read-only memory, and every byte lands where its piece says.
"""

from __future__ import annotations

import numpy as np

from tests.contract.test_transport_contract import Pair, pattern
from tests.contract.test_transport_contract import pair as pair  # the suite's fixture
from transfer_engine import Op, RequestState

LAYERS = 80  # more than the registrations the engine scans back over (64)
PIECE = 512
VALUES = 24


def test_values_taking_a_piece_from_every_layer_land_in_order(pair: Pair) -> None:
    """24 values x 80 pieces, piece k of every value in layer k's own registration, read with digests:
    every layer's rows hold the remote's bytes in order, and nothing lands past them."""
    import xxhash

    layers = [np.zeros((VALUES + 1) * PIECE, np.uint8) for _ in range(LAYERS)]
    for layer in layers:
        pair.initiator.register(layer)
    value_bytes = LAYERS * PIECE
    addrs = [layers[k].ctypes.data + v * PIECE for v in range(VALUES) for k in range(LAYERS)]
    offsets = [v * value_bytes for v in range(VALUES)]
    handle = pair.initiator.submit(
        Op.READ, [0] * VALUES, pair.segment, pair.remote.id, offsets, value_bytes,
        digests=[1] * VALUES, pieces=([LAYERS] * VALUES, addrs, [PIECE] * len(addrs)),
    )  # fmt: skip
    assert handle.wait() and (handle.states() == RequestState.COMPLETED).all()
    want = pattern(VALUES * value_bytes).reshape(VALUES, LAYERS, PIECE)
    for k, layer in enumerate(layers):
        assert np.array_equal(layer[: VALUES * PIECE].reshape(VALUES, PIECE), want[:, k]), k
        assert not layer[VALUES * PIECE :].any()  # the row after the last value: untouched
    taken, digests = handle.digests()
    for v in range(VALUES):
        if taken[v]:
            assert int(digests[v]) == xxhash.xxh3_64_intdigest(want[v].tobytes()), v


def test_a_piece_across_two_adjacent_registrations_or_in_read_only_memory_fails_alone(pair: Pair) -> None:
    """Registrations side by side in one buffer, visited in turn: a piece that starts in one and runs
    into the next is refused (neither holds it), as is a piece in a read-only registration next in
    turn; the values around them complete."""
    memory = np.zeros(8 * 4096, np.uint8)
    halves = [memory[i * 4096 : (i + 1) * 4096] for i in range(8)]
    for half in halves:
        pair.initiator.register(half)
    frozen = np.zeros(4096, np.uint8)
    frozen.flags.writeable = False
    pair.initiator.register(frozen)
    base = memory.ctypes.data
    good = [base + k * 4096 for k in range(8)]  # one piece of every registration, in turn
    straddling = [*good[:3], base + 4 * 4096 - 100, *good[4:]]  # piece 3 runs from region 3 into 4
    into_frozen = [*good, frozen.ctypes.data]
    values = [good, straddling, good, into_frozen, good]
    counts = [len(v) for v in values]
    lengths = [PIECE * c for c in counts]
    handle = pair.initiator.submit(
        Op.READ, [0] * len(values), pair.segment, pair.remote.id, [0] * len(values), lengths,
        pieces=(counts, [a for v in values for a in v], [PIECE] * sum(counts)),
    )  # fmt: skip
    assert handle.wait()
    states = list(handle.states())
    assert states == [RequestState.COMPLETED, RequestState.FAILED, RequestState.COMPLETED,
                      RequestState.FAILED, RequestState.COMPLETED]  # fmt: skip
    assert not frozen.any()
    want = pattern(8 * PIECE).reshape(8, PIECE)
    for k in range(8):
        assert np.array_equal(halves[k][:PIECE], want[k]), k
