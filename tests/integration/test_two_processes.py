"""Two real processes: data verified byte for byte both ways, a killed peer, and a hostile peer."""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest

from tests.conftest import TargetProcess, freeze, start_target, stop_target
from tests.helpers.raw_peer import ERROR, PROOF_ACK, READ, READ_DATA, WRITE, RawPeer, open_session
from tests.helpers.target_process import pattern
from transfer_engine import Op, RequestState, TransferEngine, _tools
from transfer_engine.errors import CODE_NAMES

SIZE = 8 << 20


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("which", ["shared", "numpy"])
def test_both_directions_byte_exact(
    target: TargetProcess, engine: TransferEngine, transport: str, which: str
) -> None:
    region_id = target.shared_region if which == "shared" else target.numpy_region
    segment = engine.open_peer(target.name, transport)
    assert segment.transport == transport
    local = engine.allocate(SIZE)
    assert local.array is not None
    engine.read(local.addr, segment, region_id, 0, SIZE)
    assert np.array_equal(local.array, pattern(SIZE))
    seed = 17 if transport == "tcp" else 29
    local.array[:] = pattern(SIZE, seed)
    offset, length = 4099, 3 * (1 << 20) + 5
    engine.write(local.addr + offset, segment, region_id, offset, length)
    assert target.check(which, offset, length, seed + 7 * offset)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_killed_peer_fails_requests_within_timeout(engine: TransferEngine, transport: str) -> None:
    target = start_target(size=64 << 20)
    try:
        segment = engine.open_peer(target.name, transport)
        local = engine.allocate(64 << 20)
        n, size = 64, 1 << 20
        offsets = np.arange(n, dtype=np.uint64) * size
        handles = []
        start = time.monotonic()
        for _ in range(20):  # keep the link busy while the peer dies
            handles.append(
                engine.submit(
                    Op.READ, local.addr + offsets, segment, target.shared_region, offsets, size, timeout=8
                )
            )
        target.proc.kill()
        target.proc.wait()
        for h in handles:
            assert h.wait(timeout=15)
        assert time.monotonic() - start < 12
        # A fresh batch after the death fails fast.
        after = engine.submit(Op.READ, [local.addr], segment, target.shared_region, [0], 4096, timeout=8)
        assert after.wait(timeout=10)
        assert list(after.states()) == [RequestState.FAILED]
        assert time.monotonic() - start < 12
        states = np.concatenate([h.states() for h in handles])
        assert not (states == RequestState.PENDING).any()
    finally:
        stop_target(target)


def test_hung_peer_times_out(engine: TransferEngine) -> None:
    """A peer that stops answering (SIGSTOP) turns requests TIMED_OUT at the deadline, not later."""
    import signal

    target = start_target()
    try:
        segment = engine.open_peer(target.name, "tcp")
        local = engine.allocate(1 << 20)
        freeze(target.proc.pid)
        start = time.monotonic()
        handle = engine.submit(
            Op.READ, [local.addr], segment, target.shared_region, [0], 1 << 20, timeout=1.0
        )
        assert handle.wait()
        elapsed = time.monotonic() - start
        assert list(handle.states()) == [RequestState.TIMED_OUT]
        assert 0.9 <= elapsed < 3.0
    finally:
        target.proc.send_signal(signal.SIGCONT)
        stop_target(target)


def test_a_known_bad_peer_fails_fast_and_is_probed_in_the_background() -> None:
    """After a hung peer's first failure, requests to it fail at once (not after another handshake
    timeout each) while a probe reconnects in the background; once it answers again, they succeed."""
    target = start_target()
    engine = TransferEngine(
        transport="tcp", handshake_timeout=0.5, tcp_io_timeout=0.5, tcp_connect_timeout=0.5
    )
    try:
        segment = engine.open_peer(target.name)
        local = engine.allocate(1 << 16, export=False)

        def read() -> tuple[RequestState, float]:
            start = time.monotonic()
            state, _ = engine.transfer_one(
                Op.READ, local.addr, segment, target.shared_region, 0, 4096, timeout=3
            )
            return state, time.monotonic() - start

        assert read()[0] == RequestState.COMPLETED
        freeze(target.proc.pid)
        first, _ = read()  # waits for the stall to be detected
        assert first != RequestState.COMPLETED
        deadline = time.monotonic() + 10
        while read()[1] > 0.05:  # the reconnection that learns the peer is bad
            assert time.monotonic() < deadline
        slow = [t for state, t in (read() for _ in range(50)) if state == RequestState.COMPLETED or t > 0.05]
        assert not slow  # known bad: every request fails at once
        target.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while read()[0] != RequestState.COMPLETED:  # a background probe finds it back (back-off <= 2 s)
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        target.proc.send_signal(signal.SIGCONT)
        engine.close()
        stop_target(target)


def _tcp_address(engine: TransferEngine, name: str) -> str:
    """Where the peer's tcp transport listens (its section of the segment descriptor)."""
    segment = engine.open_peer(name, "tcp")
    return str(engine._core_engine().peer_info(segment.handle)["transports"]["tcp"]["address"])


def _region_key(engine: TransferEngine, name: str, region_id: int) -> int:
    """The region's key in `engine`'s own session with the peer (what its descriptor carries)."""
    segment = engine.open_peer(name, "tcp")
    assert any(r.id == region_id for r in segment.regions)
    handle = engine._core_engine().peer_info(segment.handle)
    return next(r["key"] for r in handle["regions"] if r["id"] == region_id)


def _refused_then_closed(peer: RawPeer, reply: dict, code: str) -> None:
    assert reply["opcode"] == ERROR and CODE_NAMES[reply["status"]] == code
    with pytest.raises(ConnectionError):
        peer.recv_header()


def test_a_data_connection_proves_its_session_before_any_request(
    target: TargetProcess, engine: TransferEngine
) -> None:
    """The target proves the session to the peer (RawPeer.authenticate checks it) and admits the peer
    only on its proof; a request before it, or a wrong proof, is refused and the connection closed."""
    address = _tcp_address(engine, target.name)
    session = open_session(target.name)
    key = session["keys"][target.shared_region]
    with RawPeer(address) as peer:
        assert peer.authenticate(session)["opcode"] == PROOF_ACK
        peer.send(_tools.encode_frame_header(READ, 0, 1, target.shared_region, key, 0, 4096))
        assert peer.recv_header()["opcode"] == READ_DATA
    with RawPeer(address) as peer:  # a request as the first frame
        peer.send(_tools.encode_frame_header(READ, 0, 1, target.shared_region, key, 0, 4096))
        _refused_then_closed(peer, peer.recv_header(), "PROTOCOL_ERROR")
    with RawPeer(address) as peer:  # the session's id without its key (it crossed the wire in the clear)
        _refused_then_closed(peer, peer.authenticate(session, key=bytes(32)), "PERMISSION_DENIED")


def test_a_region_key_is_refused_in_another_session(target: TargetProcess, engine: TransferEngine) -> None:
    """Region keys are scoped to the handshake session that handed them: the engine's own session's key
    for a region is refused on a connection of another session, whose own key works."""
    address = _tcp_address(engine, target.name)
    theirs = _region_key(engine, target.name, target.shared_region)
    session = open_session(target.name)
    ours = session["keys"][target.shared_region]
    assert ours != theirs and open_session(target.name)["keys"][target.shared_region] != ours
    with RawPeer(address) as peer:
        peer.authenticate(session)
        peer.send(_tools.encode_frame_header(READ, 0, 1, target.shared_region, theirs, 0, 4096))
        reply = peer.recv_header()
        assert reply["opcode"] == ERROR and CODE_NAMES[reply["status"]] == "PERMISSION_DENIED"
        peer.send(_tools.encode_frame_header(READ, 0, 2, target.shared_region, ours, 0, 4096))
        assert peer.recv_header()["opcode"] == READ_DATA


def test_peer_rejects_bad_key_and_bounds(target: TargetProcess, engine: TransferEngine) -> None:
    session = open_session(target.name)
    key = session["keys"][target.shared_region]
    peer = RawPeer(_tcp_address(engine, target.name))
    peer.authenticate(session)
    cases = [
        (READ, target.shared_region, key ^ 1, 0, 4096, "PERMISSION_DENIED"),
        (READ, target.shared_region, key, SIZE - 100, 4096, "OUT_OF_RANGE"),
        (READ, target.shared_region, key, 2**64 - 10, 4096, "OUT_OF_RANGE"),
        (READ, 123456, key, 0, 4096, "NOT_FOUND"),
        (WRITE, target.shared_region, key ^ 1, 0, 4096, "PERMISSION_DENIED"),
        (WRITE, target.shared_region, key, SIZE - 1, 4096, "OUT_OF_RANGE"),
    ]
    for i, (op, region, k, offset, length, expected) in enumerate(cases):
        peer.send(_tools.encode_frame_header(op, 0, i, region, k, offset, length))
        if op == WRITE:
            peer.send(b"\xff" * length)  # refused payloads are drained, the stream stays usable
        reply = peer.recv_header()
        assert reply["opcode"] == ERROR and reply["request_id"] == i
        assert CODE_NAMES[reply["status"]] == expected
    # A valid request on the same connection still works, and nothing was written by the refusals.
    peer.send(_tools.encode_frame_header(READ, 0, 99, target.shared_region, key, SIZE - 4096, 4096))
    reply = peer.recv_header()
    assert reply["opcode"] == READ_DATA
    assert peer.recv_exact(4096) == pattern(SIZE)[-4096:].tobytes()
    peer.close()
    assert target.check("shared", 0, SIZE, 0)


def test_malformed_frames_close_only_that_connection(target: TargetProcess, engine: TransferEngine) -> None:
    address = _tcp_address(engine, target.name)
    junks = [b"\x00" * 64, b"GET / HTTP/1.1\r\n\r\n" + b"x" * 48, _tools.encode_frame_header(READ_DATA)]
    for junk, authenticated in [(j, a) for j in junks for a in (False, True)]:
        with RawPeer(address) as peer:
            if authenticated:
                peer.authenticate(open_session(target.name))
            peer.send(junk)
            _refused_then_closed(peer, peer.recv_header(), "PROTOCOL_ERROR")
    segment = engine.open_peer(target.name, "tcp")
    local = engine.allocate(4096)
    engine.read(local.addr, segment, target.shared_region, 0, 4096)
    assert local.array is not None and np.array_equal(local.array, pattern(4096))


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_restarted_peer_is_never_mistaken_for_the_old_one(engine: TransferEngine, transport: str) -> None:
    """Region ids restart with the peer: an old handle must fail, not read the new process's memory."""
    from transfer_engine import TransferConnectionError

    first = start_target()
    port = int(first.name.rsplit(":", 1)[1])
    local = engine.allocate(4096)
    try:
        segment = engine.open_peer(first.name, transport)
        engine.read(local.addr, segment, first.shared_region, 0, 4096)
    finally:
        stop_target(first)
    second = start_target(port=port)
    try:
        assert second.name == first.name and second.shared_region == first.shared_region
        with pytest.raises(TransferConnectionError):
            engine.read(local.addr, segment, first.shared_region, 0, 4096)
        fresh = engine.open_peer(second.name, transport)
        assert fresh.handle != segment.handle
        engine.read(local.addr, fresh, second.shared_region, 0, 4096)
        assert local.array is not None and np.array_equal(local.array, pattern(4096))
    finally:
        stop_target(second)


def test_submit_returns_at_once_while_a_reconnection_waits_on_a_stopped_peer() -> None:
    """A request naming a region the engine has not heard of needs a fresh handshake; with the peer
    SIGSTOPped that handshake hangs until its timeout, on a connector thread: submit never waits, and
    the requests queued meanwhile fail with the handshake's error (nothing is left pending)."""
    target = start_target()
    try:
        with TransferEngine(handshake_timeout=1.0, tcp_io_timeout=2.0) as engine:
            segment = engine.open_peer(target.name, "tcp")
            local = engine.allocate(8192)
            freeze(target.proc.pid)
            started = time.monotonic()
            unknown = engine.submit(Op.READ, [local.addr], segment, 10**6, [0], 4096, timeout=10)
            known = engine.submit(Op.READ, [local.addr + 4096], segment, target.shared_region, [0], 4096)
            assert time.monotonic() - started < 0.2  # neither call waited for the peer
            assert not unknown.done() and not known.done()
            unknown.wait()
            known.wait()
            assert time.monotonic() - started < 5
            assert unknown.states().tolist() == [RequestState.FAILED] == known.states().tolist()
            assert CODE_NAMES[int(unknown.errors()[0])] == "CONNECTION_FAILED"
            target.proc.send_signal(signal.SIGCONT)
            engine.read(local.addr, segment, target.shared_region, 0, 4096)  # the peer is back: reconnects
            assert local.array is not None and np.array_equal(local.array[:4096], pattern(4096))
    finally:
        target.proc.send_signal(signal.SIGCONT)
        stop_target(target)
