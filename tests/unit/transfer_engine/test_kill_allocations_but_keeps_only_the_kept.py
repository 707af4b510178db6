"""TransferEngine.kill_allocations_but, a node's remount fencing in one pass: a peer's transfer into a
kept allocation is still admitted, into any other allocation handed out before it is refused, over a
real transport; bad kept lists are refused with nothing killed."""

from __future__ import annotations

import pytest

from transfer_engine import InvalidArgumentError, Op, RequestState, StaleLocationError, TransferEngine

SLOTS = 64


def test_only_the_kept_allocations_admit_a_peers_transfer() -> None:
    with TransferEngine(transport="tcp") as a, TransferEngine(transport="tcp") as b:
        segment = b.allocate(1 << 20, fence_slots=SLOTS)
        buf = a.allocate(4096, export=False)
        peer = a.open_peer(b.name)
        handed = {slot: 3 + slot % 5 for slot in range(0, SLOTS, 3)}  # (slot, generation) of each
        for slot, gen in handed.items():
            b.announce_allocations(segment, [slot], [gen], [slot * 4096], [4096])
        kept = {slot: gen for slot, gen in handed.items() if slot % 2 == 0}
        # in descending order, as the catalog names them (newest first)
        slots, gens = sorted(kept, reverse=True), [kept[s] for s in sorted(kept, reverse=True)]
        assert b.kill_allocations_but(segment, 10, slots, gens)
        for slot, gen in handed.items():
            got = a.transfer_one(Op.READ, buf.addr, peer, segment.id, slot * 4096, 4096, fence=(slot, gen))
            want = (
                (RequestState.COMPLETED, 0)
                if slot in kept
                else (RequestState.FAILED, StaleLocationError.code)
            )
            assert got == want, (slot, gen)


@pytest.mark.parametrize(
    ("slots", "gens"),
    [([1, 2], [5]), ([1, SLOTS], [5, 5]), ([1, 2], [5, 0]), ([4, 1, 4], [5, 5, 6]), ([-1], [5]), ([1], [-5])],
    ids=["lengths differ", "past the table", "generation 0", "a slot twice", "negative slot", "negative gen"],
)
def test_a_bad_kept_list_is_refused_and_kills_nothing(slots: list[int], gens: list[int]) -> None:
    with TransferEngine(transport="tcp") as b:
        segment = b.allocate(1 << 20, fence_slots=SLOTS)
        with pytest.raises(InvalidArgumentError):
            b.kill_allocations_but(segment, 10, slots, gens)
        with b.fenced(segment, 7, 5):  # alive: nothing was killed
            pass
