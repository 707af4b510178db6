"""The Mooncake engine twin addresses peer memory by virtual address; it is translated per batch."""

from __future__ import annotations

import pytest

from kvstore.integrations.mooncake import _translate
from transfer_engine import Peer
from transfer_engine.engine import RemoteRegion

PEER = Peer(
    "127.0.0.1:1",
    1,
    "tcp",
    7,
    (RemoteRegion(2, 50, "cpu", True, base=5000), RemoteRegion(1, 100, "cpu", True, base=1000)),
)


def test_addresses_map_to_region_and_offset() -> None:
    where = _translate(PEER, [1000, 1050, 5049], [100, 10, 1])
    assert where is not None
    assert where[0].tolist() == [1, 1, 2] and where[1].tolist() == [0, 50, 49]


@pytest.mark.parametrize(
    ("address", "length"),
    [(1099, 2), (2000, 1), (999, 1), (5050, 1), (-1, 1), (1000, 2**64 - 1), (2**64 + 5, 1)],
    ids=["crosses-end", "gap", "before-all", "after-all", "negative", "wraps", "over-64-bits"],
)
def test_ranges_outside_every_region_are_refused(address: int, length: int) -> None:
    assert _translate(PEER, [1000, address], [1, length]) is None
