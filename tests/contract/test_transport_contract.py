"""One suite over every transport: a transport is done when this passes on it.

The transports come from the C++ registration list (csrc/transport/transports.def), so a new one is
tested here on arrival. Both engines live in this process; each transport is forced in turn, and one
that cannot reach a peer in the same process is skipped with that reason.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.conftest import ucx_missing
from transfer_engine import (
    NotSupportedError,
    Op,
    Peer,
    Region,
    RequestState,
    TransferEngine,
    TransferFailedError,
    cuda,
)
from transfer_engine.config import TransportSpec, transport_specs
from transfer_engine.errors import CODE_NAMES, InvalidArgumentError

SLICE = 64 * 1024  # small slices so multi-slice paths run on small buffers


def short_settings(spec: TransportSpec) -> dict[str, object]:
    """Small slices (multi-slice paths on small buffers) and short I/O timeouts, where a transport has
    them."""
    values = {"slice_size": SLICE, "io_timeout": 2.0}
    return {f"{spec.name}_{o['name']}": values[o["name"]] for o in spec.options if o["name"] in values}


def pattern(n: int, seed: int = 0) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) * 7 + 3 + seed) % 251).astype(np.uint8)


class DeviceBytes:
    """Device memory indexed like the numpy view of a host region (each access copies through the driver),
    so one suite checks transports whose peers' memory is on a GPU."""

    def __init__(self, memory: cuda.DeviceMemory) -> None:
        self.memory = memory

    def copy(self) -> np.ndarray:
        out = np.empty(self.memory.nbytes, np.uint8)
        cuda.copy_to_host(self.memory.device, [self.memory.ptr], [out.ctypes.data], [out.nbytes])
        return out

    def __getitem__(self, key: Any) -> Any:
        return self.copy()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        host = self.copy()
        host[key] = value
        cuda.copy_to_device(self.memory.device, [self.memory.ptr], [host.ctypes.data], [host.nbytes])


@dataclass
class Pair:
    initiator: TransferEngine
    target: TransferEngine
    segment: Peer
    local: Region
    remote: Region
    remote_bytes: Any  # the remote region's bytes: a numpy view, or DeviceBytes
    on_gpu: bool  # the target's memory is device memory (transports that serve only GPU memory)
    device_memory: list[cuda.DeviceMemory]
    one_sided: bool = False  # peers reach the memory without the target's checks (UCX RMA)

    def target_region(self, size: int, fill: np.ndarray | int) -> tuple[Region, Any]:
        """A new exported target region of the kind the transport serves, holding `fill`."""
        if self.on_gpu:
            memory = cuda.DeviceMemory(size)
            self.device_memory.append(memory)
            region = self.target.register_ptr(memory.ptr, size, kind="gpu:0", export=True)
            view: Any = DeviceBytes(memory)
        else:
            region = self.target.allocate(size)
            view = region.array
        view[:] = fill
        return region, view


@pytest.fixture(params=transport_specs(), ids=lambda spec: spec.name)
def pair(request: pytest.FixtureRequest) -> Iterator[Pair]:
    spec: TransportSpec = request.param
    if "same-process" not in spec.reach:
        pytest.skip(f"{spec.name} cannot reach a peer in the same process (reach: {', '.join(spec.reach)})")
    on_gpu = "host" not in spec.remote_kinds
    if on_gpu and not cuda.available():
        try:
            cuda.require()
        except NotSupportedError as exc:
            pytest.skip(f"{spec.name} serves only GPU memory: {exc}")
    transport = spec.name
    overrides: dict[str, object] = {}
    for other in transport_specs():
        overrides.update(short_settings(other))
    if transport == "ucx":
        overrides["ucx_prefer"] = True  # (a target in auto mode starts UCX only with an RDMA NIC)
        if reason := ucx_missing():
            pytest.skip(f"ucx: {reason}")
    with TransferEngine(**overrides) as target, TransferEngine(transport=transport, **overrides) as initiator:
        local = initiator.allocate(4 << 20)
        p = Pair(initiator, target, None, local, None, None, on_gpu, [], spec.one_sided)  # type: ignore[arg-type]
        p.remote, p.remote_bytes = p.target_region(4 << 20, pattern(4 << 20))
        p.segment = initiator.open_peer(target.name)
        assert p.segment.transport == transport
        try:
            yield p
        finally:
            initiator.close()
            target.close()
            for memory in p.device_memory:
                memory.free()


def codes(handle_errors: np.ndarray) -> list[str]:
    return [CODE_NAMES[int(c)] for c in handle_errors]


def test_read_whole_region_byte_exact(pair: Pair) -> None:
    pair.initiator.read(pair.local.addr, pair.segment, pair.remote.id, 0, pair.remote.length)
    assert pair.local.array is not None
    assert np.array_equal(pair.local.array, pattern(pair.remote.length))


def test_write_then_target_sees_bytes(pair: Pair) -> None:
    assert pair.local.array is not None
    pair.local.array[:] = pattern(pair.local.length, seed=5)
    pair.initiator.write(pair.local.addr + 100, pair.segment, pair.remote.id, 1000, 300_000)
    assert np.array_equal(pair.remote_bytes[1000:301_000], pair.local.array[100:300_100])
    assert np.array_equal(pair.remote_bytes[:1000], pattern(1000))  # nothing outside the range touched
    assert pair.remote_bytes[301_000] == pattern(301_001)[301_000]


@pytest.mark.parametrize("length", [1, 2047, 2048, 2081, 4095, 4097, SLICE - 1, SLICE + 1, 3 * SLICE + 17])
def test_odd_sizes_and_offsets(pair: Pair, length: int) -> None:
    assert pair.local.array is not None
    pair.local.array[:] = 0
    offset = 12_345
    pair.initiator.read(pair.local.addr + 7, pair.segment, pair.remote.id, offset, length)
    assert np.array_equal(pair.local.array[7 : 7 + length], pattern(offset + length)[offset:])
    assert pair.local.array[7 + length] == 0 and pair.local.array[6] == 0


def test_mixed_batch(pair: Pair) -> None:
    assert pair.local.array is not None
    n, size = 64, 20_000
    pair.local.array[:] = pattern(pair.local.length, seed=9)
    ops = np.array([Op.READ if i % 2 else Op.WRITE for i in range(n)], dtype=np.uint8)
    local = pair.local.addr + np.arange(n, dtype=np.uint64) * size
    remote_offsets = np.arange(n, dtype=np.uint64) * size + 2 * (1 << 20)
    before = pair.remote_bytes.copy()
    states = pair.initiator.transfer_sync(ops, local, pair.segment, pair.remote.id, remote_offsets, size)
    assert (states == RequestState.COMPLETED).all()
    for i in range(n):
        lo, ro = i * size, int(remote_offsets[i])
        if i % 2:  # read: local got the target's original bytes
            assert np.array_equal(pair.local.array[lo : lo + size], before[ro : ro + size])
        else:
            assert np.array_equal(pair.remote_bytes[ro : ro + size], pair.local.array[lo : lo + size])


def test_bad_requests_fail_alone(pair: Pair) -> None:
    """Out-of-range, unknown region and unregistered local memory fail; the good request completes."""
    stray = np.zeros(4096, dtype=np.uint8)  # never registered
    local = [pair.local.addr, pair.local.addr, pair.local.addr, stray.ctypes.data, pair.local.addr]
    regions = [pair.remote.id, pair.remote.id, 999_999, pair.remote.id, pair.remote.id]
    offsets = [0, pair.remote.length - 10, 0, 0, 2**64 - 8]
    handle = pair.initiator.submit(Op.READ, local, pair.segment, regions, offsets, 4096)
    assert handle.wait(timeout=10)
    assert list(handle.states()) == [RequestState.COMPLETED] + [RequestState.FAILED] * 4
    assert codes(handle.errors()) == ["OK", "OUT_OF_RANGE", "NOT_FOUND", "INVALID_ARGUMENT", "OUT_OF_RANGE"]
    with pytest.raises(TransferFailedError):
        handle.raise_for_status()


def test_numpy_registered_target_region(pair: Pair) -> None:
    """Memory the target registered from Python (not memfd) is reachable too (shm: by CMA)."""
    if pair.on_gpu:
        pytest.skip("the target's memory is device memory: registered by pointer in every case")
    plain = pattern(1 << 20, seed=3)
    region = pair.target.register(plain, export=True)
    segment = pair.initiator.refresh_peer(pair.segment)
    pair.initiator.read(pair.local.addr, segment, region.id, 0, plain.size)
    assert pair.local.array is not None
    assert np.array_equal(pair.local.array[: plain.size], plain)


def test_region_added_after_open_is_found(pair: Pair) -> None:
    later, _ = pair.target_region(1 << 20, 42)
    pair.initiator.read(pair.local.addr, pair.segment, later.id, 0, later.length)  # refreshes on its own
    assert pair.local.array is not None and (pair.local.array[: later.length] == 42).all()


def test_unregistered_target_region_refuses(pair: Pair) -> None:
    """Refused by the target at once; by a one-sided transport (whose peers touch memory without the
    target's checks) once the initiator's view of the peer is refreshed."""
    pair.target.unregister(pair.remote)
    if pair.one_sided:
        pair.segment = pair.initiator.refresh_peer(pair.segment)
    handle = pair.initiator.submit(Op.READ, [pair.local.addr], pair.segment, pair.remote.id, [0], 4096)
    assert handle.wait(timeout=10)
    assert list(handle.states()) == [RequestState.FAILED]
    assert codes(handle.errors())[0] == "NOT_FOUND"


def test_unregister_during_transfers_is_safe(pair: Pair) -> None:
    """Unregistering both sides while batches run: no crash, every request ends, nothing hangs."""
    stop = threading.Event()
    finished: list[np.ndarray] = []

    def pump() -> None:
        while not stop.is_set():
            handle = pair.initiator.submit(
                Op.READ,
                pair.local.addr + np.arange(16, dtype=np.uint64) * SLICE,
                pair.segment,
                pair.remote.id,
                np.arange(16, dtype=np.uint64) * SLICE,
                SLICE,
                timeout=5,
            )
            assert handle.wait(timeout=10)
            finished.append(handle.states())

    worker = threading.Thread(target=pump)
    worker.start()
    while not finished:
        threading.Event().wait(0.001)
    pair.target.unregister(pair.remote)
    pair.initiator.unregister(pair.local)
    stop.set()
    worker.join(timeout=20)
    assert not worker.is_alive()
    states = np.concatenate(finished)
    assert set(np.unique(states)) <= {RequestState.COMPLETED, RequestState.FAILED}
    after = pair.initiator.submit(Op.READ, [pair.local.addr], pair.segment, pair.remote.id, [0], 4096)
    assert after.wait(timeout=10)
    assert list(after.states()) == [RequestState.FAILED]


def test_concurrent_batches_from_threads(pair: Pair) -> None:
    assert pair.local.array is not None
    errors: list[BaseException] = []

    def reader(k: int) -> None:
        try:
            for _ in range(20):
                base = k * (1 << 20)
                pair.initiator.read(pair.local.addr + base, pair.segment, pair.remote.id, base, 1 << 20)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert np.array_equal(pair.local.array, pattern(pair.local.length))


KINDS = ["host", "host-pinned", "gpu:0", "file"]


def test_memory_kinds_it_cannot_reach_are_refused_at_submit(pair: Pair) -> None:
    """Memory registered with a kind the transport does not declare fails per request (NOT_SUPPORTED),
    before any byte moves. GPU memory must be real device memory to be registered at all."""
    spec = next(s for s in transport_specs() if s.name == pair.segment.transport)
    foreign = [k for k in KINDS if k.split(":")[0] not in spec.local_kinds]
    if not cuda.available():
        foreign = [k for k in foreign if not k.startswith("gpu")]
    if not foreign:
        pytest.skip(f"{spec.name} reaches every memory kind that can be registered here")
    if foreign[0].startswith("gpu"):
        memory = cuda.DeviceMemory(1 << 16)
        pair.device_memory.append(memory)
        backing: Any = DeviceBytes(memory)
        backing[:] = 0
        region = pair.initiator.register_ptr(memory.ptr, 1 << 16, kind=foreign[0], export=False)
    else:
        backing = np.zeros(1 << 16, np.uint8)  # host memory labelled with another kind: never touched
        region = pair.initiator.register_ptr(
            backing.ctypes.data, backing.nbytes, kind=foreign[0], export=False
        )
    handle = pair.initiator.submit(Op.READ, [region.addr], pair.segment, pair.remote.id, [0], 4096)
    handle.wait()
    assert handle.states().tolist() == [RequestState.FAILED]
    assert codes(handle.errors()) == ["NOT_SUPPORTED"]
    assert not backing.copy().any()


def test_digests_taken_as_bytes_land_are_xxh3_of_them(pair: Pair) -> None:
    """A read that asks for a digest and moves as one slice gets the XXH3-64 of the bytes it landed (where
    the transport hashes as they land: memory copies and tcp); a read of several slices, a write, or one
    that did not ask gets none. Either way a digest given is never wrong."""
    import xxhash

    sizes = [1, 4097, SLICE, SLICE + 1, 100_000]
    offsets = [0, 5, 70_000, 300_000, 1_000_000]
    local = [pair.local.addr + i * 200_000 for i in range(len(sizes))]
    ops = [Op.READ, Op.READ, Op.READ, Op.READ, Op.WRITE]
    handle = pair.initiator.submit(ops, local, pair.segment, pair.remote.id, offsets, sizes, digests=[1] * 5)
    assert handle.wait() and (handle.states() == RequestState.COMPLETED).all()
    taken, digests = handle.digests()
    assert pair.local.array is not None
    for i, (size, offset) in enumerate(zip(sizes, offsets, strict=True)):
        if taken[i]:
            landed = pair.local.array[i * 200_000 : i * 200_000 + size].tobytes()
            assert (
                int(digests[i])
                == xxhash.xxh3_64_intdigest(landed)
                == xxhash.xxh3_64_intdigest(pattern(offset + size)[offset:].tobytes())
            )
    assert not taken[3] and not taken[4]  # several slices; a write
    if pair.segment.transport in ("local", "shm", "tcp"):
        assert taken[:3].all()
    plain = pair.initiator.submit(Op.READ, local[0], pair.segment, pair.remote.id, 0, 4096)
    assert plain.wait() and not plain.digests()[0].any()


def test_wait_verified_checks_each_read_against_its_digest(pair: Pair) -> None:
    """wait_verified runs a batch to its end and verifies each read that asked for a digest: a read of
    one slice, of several slices (hashed after it lands) and of several pieces verify against xxhash's
    digest of the remote bytes, a wrong expected digest is a MISMATCH (the bytes still landed), an
    unchecked request or a write is VERIFIED once complete, a read that did not ask for a digest is
    UNCHECKED, and a failed request gives its error code."""
    import xxhash

    from transfer_engine import ReadCheck

    assert pair.local.array is not None
    sizes = [4097, SLICE + 1, 3000, 5000, 4096, 4096, 100, 4096]
    offsets = [5, 300_000, 70_000, 80_000, 90_000, 2_000_000, 0, pair.remote.length]  # the last: out of range
    local = [pair.local.addr + i * 200_000 for i in range(len(sizes))]
    ops = [Op.READ] * len(sizes)
    ops[5] = Op.WRITE
    asked = [1, 1, 1, 1, 0, 1, 1, 1]
    pieces = [(0, 0)] * len(sizes)
    pieces[2] = (2, 0)  # 3000 bytes landing in two pieces
    counts = [n for n, _ in pieces]
    piece_addrs = [local[2], local[2] + 10_000]
    piece_lengths = [1000, 2000]
    local[2] = 0
    want = [
        xxhash.xxh3_64_intdigest(pattern(o + n)[o:].tobytes())
        for o, n in zip(offsets[:5], sizes[:5], strict=True)
    ]
    expected = [*want, 0, 0, 0]
    expected[3] ^= 1  # a wrong digest
    check = [1, 1, 1, 1, 1, 0, 0, 1]
    handle = pair.initiator.submit(
        ops, local, pair.segment, pair.remote.id, offsets, sizes, digests=asked,
        pieces=(counts, piece_addrs, piece_lengths),
    )  # fmt: skip
    verdicts = handle.wait_verified(np.asarray(expected, np.uint64), np.asarray(check, np.uint8))
    assert handle.done()
    v = ReadCheck
    assert verdicts[:7].tolist() == [v.VERIFIED, v.VERIFIED, v.VERIFIED, v.MISMATCH, v.UNCHECKED, 0, 0]
    assert codes(verdicts[7:]) == ["OUT_OF_RANGE"]
    landed = pair.local.array[3 * 200_000 : 3 * 200_000 + 5000].tobytes()
    assert landed == pattern(80_000 + 5000)[80_000:].tobytes()
    with pytest.raises(Exception, match="one expected digest"):
        handle.wait_verified(np.zeros(2, np.uint64), np.zeros(2, np.uint8))
    # One read on its own, the same way (the store's single gets).
    one = [pair.initiator.read_one_verified(local[0], pair.segment, pair.remote.id, offsets[0], sizes[0], e)
           for e in (want[0], want[0] ^ 1)]  # fmt: skip
    assert one == [v.VERIFIED, v.MISMATCH]
    far = pair.initiator.read_one_verified(local[0], pair.segment, pair.remote.id, pair.remote.length, 8, 0)
    assert codes(np.asarray([far])) == ["OUT_OF_RANGE"]


@pytest.mark.parametrize(
    "sizes",
    [[1000, 1, 4095, 20000, 12345], [SLICE, 1, 4095, SLICE + 7, 12345, SLICE]],
    ids=["one-slice", "several-slices"],
)
def test_a_request_of_many_pieces_scatters_and_gathers_in_order(pair: Pair, sizes: list[int]) -> None:
    """One request whose local side is a list of pieces (vLLM's layout: a block's bytes in every layer)
    reads one remote range into them in order, and writes them back as one range; a transport that
    cannot gather moves each piece as a request of its own, with the same bytes. A read moved as one
    slice gets one digest over all its pieces (where the transport hashes as bytes land)."""
    import xxhash

    assert pair.local.array is not None
    starts = [3_000_000 - 7 * 70_000 + k * 70_000 for k in range(len(sizes))]  # out of order, gaps between
    addrs = [pair.local.addr + s for s in reversed(starts)]
    total = sum(sizes)
    handle = pair.initiator.submit(
        Op.READ,
        0,
        pair.segment,
        pair.remote.id,
        1000,
        total,
        digests=[1],
        pieces=([len(sizes)], addrs, sizes),
    )
    assert handle.wait() and (handle.states() == RequestState.COMPLETED).all()
    want = pattern(1000 + total)[1000:].tobytes()
    landed = b"".join(pair.local.array[a - pair.local.addr : a - pair.local.addr + n].tobytes()
                      for a, n in zip(addrs, sizes, strict=True))  # fmt: skip
    assert landed == want
    taken, digests = handle.digests()
    if taken[0]:
        assert int(digests[0]) == xxhash.xxh3_64_intdigest(want)
    if pair.segment.transport in ("local", "shm", "tcp"):
        assert taken[0] == (total <= SLICE)
    # Written back elsewhere as one range, from the same pieces (mixed with a plain request).
    handle = pair.initiator.submit(
        [Op.WRITE, Op.READ],
        [0, pair.local.addr],
        pair.segment,
        pair.remote.id,
        [2_000_000, 0],
        [total, 10],
        pieces=([len(sizes), 0], addrs, sizes),
    )
    assert handle.wait() and (handle.states() == RequestState.COMPLETED).all()
    assert bytes(np.asarray(pair.remote_bytes[2_000_000 : 2_000_000 + total]).tobytes()) == want


def test_digests_are_right_for_any_length_and_any_split(pair: Pair) -> None:
    """Digests taken while copying (XXH3's stripes folded as the bytes move) equal xxhash's for lengths
    on every side of XXH3's stripe (64), block (1 KiB) and short-input (240) edges, whatever the pieces'
    split, and each piece's bytes are the remote's."""
    import xxhash

    assert pair.local.array is not None
    rng = np.random.default_rng(23)
    edges = [1, 240, 241, 255, 256, 1023, 1024, 1025, 1088, 2049, 4096 + 63]
    totals = edges + rng.integers(242, SLICE, size=20).tolist()
    for total in totals:
        cuts = sorted({0, total, *rng.integers(1, max(total, 2), size=rng.integers(0, 7)).tolist()})
        sizes = np.diff(cuts).tolist()
        starts = np.r_[0, np.cumsum(sizes)[:-1]] * 3 // 2  # gaps between the pieces
        addrs = [pair.local.addr + 100_000 + int(s) for s in starts]
        offset = int(rng.integers(0, 1_000_000))
        handle = pair.initiator.submit(
            Op.READ, 0, pair.segment, pair.remote.id, offset, total, digests=[1],
            pieces=([len(sizes)], addrs, sizes),
        )  # fmt: skip
        assert handle.wait() and (handle.states() == RequestState.COMPLETED).all()
        want = pattern(offset + total)[offset:].tobytes()
        base = pair.local.addr
        landed = b"".join(pair.local.array[a - base : a - base + n].tobytes()
                          for a, n in zip(addrs, sizes, strict=True))  # fmt: skip
        assert landed == want, total
        taken, digests = handle.digests()
        if taken[0]:
            assert int(digests[0]) == xxhash.xxh3_64_intdigest(want), (total, sizes)
        if pair.segment.transport in ("local", "shm", "tcp"):
            assert taken[0]


def test_bad_piece_lists_fail_their_request_alone(pair: Pair) -> None:
    assert pair.local.array is not None
    a = pair.local.addr
    plain = 4096
    cases = [
        ([2], [a, a + 100], [50, 50], 99),  # length is not the sum of the pieces
        ([2], [a, a + 100], [50, 0], 50),  # an empty piece
        ([1], [12345], [50], 50),  # an unregistered piece
        ([1], [a + (4 << 20) - 10], [50], 50),  # a piece running past its region
    ]
    for counts, addrs, lengths, total in cases:
        handle = pair.initiator.submit(
            [Op.READ, Op.READ], [0, a], pair.segment, pair.remote.id, [0, 0], [total, plain],
            pieces=([*counts, 0], addrs, lengths),
        )  # fmt: skip
        assert handle.wait()
        assert list(handle.states()) == [RequestState.FAILED, RequestState.COMPLETED], (addrs, lengths)
    with pytest.raises(InvalidArgumentError):  # the arrays themselves disagree
        pair.initiator.submit(Op.READ, 0, pair.segment, pair.remote.id, 0, 100, pieces=([1, 1], [a], [100]))
    # Counts naming more pieces than given fail those requests, not the batch.
    handle = pair.initiator.submit(Op.READ, 0, pair.segment, pair.remote.id, 0, 100, pieces=([2], [a], [100]))
    assert handle.wait() and list(handle.states()) == [RequestState.FAILED]
