"""Allocation fences: a killed (slot, generation) is refused on every path, and a kill waits for the
copies admitted before it (kvstore's guarantee against late writers and stale cached locations)."""

from __future__ import annotations

import pytest

from tests.conftest import ucx_missing
from transfer_engine import (
    InvalidArgumentError,
    Op,
    RequestState,
    StaleLocationError,
    TransferEngine,
    _core,
)

# Fenced regions are allocated host memory: transports that serve only GPU memory have none to fence, and
# one-sided ones (UCX RMA) cannot check fences (below: the engine sends fenced requests another way).
TRANSPORTS = [t["name"] for t in _core.transports() if "host" in t["remote_kinds"] and not t["one_sided"]]
STALE, DENIED, UNSUPPORTED = StaleLocationError.code, 3, 9


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_killed_allocation_is_refused_on_every_transport(transport: str) -> None:
    with TransferEngine(transport=transport) as a, TransferEngine(transport=transport) as b:
        segment = b.allocate(1 << 20, fence_slots=16)
        plain = b.allocate(1 << 16)
        buf = a.allocate(1 << 16, export=False)
        peer = a.open_peer(b.name)

        def write(slot: int, gen: int, region: int = segment.id) -> tuple[RequestState, int]:
            return a.transfer_one(Op.WRITE, buf.addr, peer, region, 0, 4096, fence=(slot, gen))

        assert write(3, 5) == (RequestState.COMPLETED, 0)
        assert write(3, 0) == (RequestState.FAILED, DENIED)  # a fenced region needs the allocation named
        assert write(3, 5, plain.id) == (RequestState.FAILED, UNSUPPORTED)  # and a plain one has none
        assert b.kill_allocations(segment, [3], [5])
        assert write(3, 5) == (RequestState.FAILED, STALE)
        assert write(3, 6) == (RequestState.COMPLETED, 0)  # the slot's next allocation lives
        assert write(99, 6) == (RequestState.FAILED, STALE)  # no such slot
        state, code = a.transfer_one(Op.READ, buf.addr, peer, segment.id, 0, 4096, fence=(3, 5))
        assert (state, code) == (RequestState.FAILED, STALE)  # reads too
        assert b.raise_fence_floor(segment, 10)
        assert write(3, 6) == (RequestState.FAILED, STALE) and write(4, 11) == (RequestState.COMPLETED, 0)


def test_a_kill_waits_for_a_copy_admitted_before_it() -> None:
    with TransferEngine() as engine:
        segment = engine.allocate(1 << 20, fence_slots=4)
        with engine.fenced(segment, 1, 7):  # a copy into the allocation is running
            assert not engine.kill_allocations(segment, [1], [7], timeout=0.05)  # cannot be confirmed
            with pytest.raises(StaleLocationError), engine.fenced(segment, 1, 7):  # nothing new gets in
                pass
        assert engine.kill_allocations(segment, [1], [7], timeout=0.05)  # the copy ended: confirmed
        with engine.fenced(segment, 2, 7):  # a copy elsewhere does not hold a kill up
            assert engine.kill_allocations(segment, [0], [3], timeout=0.05)
            assert not engine.raise_fence_floor(segment, 5, timeout=0.05)  # a floor waits for every slot


def test_fence_arguments_are_checked() -> None:
    with TransferEngine() as engine:
        plain = engine.allocate(4096)
        with pytest.raises(InvalidArgumentError):
            engine.kill_allocations(plain, [0], [1])
        with pytest.raises(InvalidArgumentError):
            engine.allocate(4096, fence_slots=1 << 27)
        with pytest.raises(InvalidArgumentError, match="fence"):  # slots without generations
            engine.submit([0], [0], [0], [1], [0], [4096], fence_slots=[0])


def test_fenced_requests_go_over_a_transport_that_checks_fences_not_a_one_sided_one() -> None:
    """UCX first (same-host transports off, ucx preferred): the link to the peer is ucx then tcp, which
    joins because ucx cannot check fences. Plain requests go over ucx; a request naming an allocation goes
    over tcp, where a killed one is refused. Forced to ucx alone, a fenced request is refused outright."""
    if reason := ucx_missing():
        pytest.skip(f"ucx: {reason}")
    settings = {"ucx_prefer": True, "shm_enabled": False, "local_enabled": False, "cuda_ipc_enabled": False}
    with TransferEngine(**settings) as a, TransferEngine(**settings) as b:
        segment = b.allocate(1 << 20, fence_slots=16)
        plain = b.allocate(1 << 16)
        buf = a.allocate(1 << 16, export=False)
        assert buf.array is not None and plain.array is not None
        peer = a.open_peer(b.name)
        assert peer.transports == ("ucx", "tcp")
        buf.array[:] = 9
        assert a.transfer_one(Op.WRITE, buf.addr, peer, plain.id, 0, 4096) == (RequestState.COMPLETED, 0)
        assert (plain.array[:4096] == 9).all()
        fenced = a.transfer_one(Op.WRITE, buf.addr, peer, segment.id, 0, 4096, fence=(3, 5))
        assert fenced == (RequestState.COMPLETED, 0)
        assert b.kill_allocations(segment, [3], [5])
        fenced = a.transfer_one(Op.WRITE, buf.addr, peer, segment.id, 0, 4096, fence=(3, 5))
        assert fenced == (RequestState.FAILED, STALE)
    with TransferEngine(transport="ucx", ucx_prefer=True) as a, TransferEngine(ucx_prefer=True) as b:
        segment = b.allocate(1 << 20, fence_slots=16)
        buf = a.allocate(1 << 16, export=False)
        peer = a.open_peer(b.name)
        assert peer.transports == ("ucx",)
        fenced = a.transfer_one(Op.WRITE, buf.addr, peer, segment.id, 0, 4096, fence=(3, 5))
        assert fenced == (RequestState.FAILED, UNSUPPORTED)
