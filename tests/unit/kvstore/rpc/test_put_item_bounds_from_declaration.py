"""A put_start's items are checked with the bounds PutItem's declaration gives its fields
(kvstore.rpc.data_requests), not bounds validate.put_items keeps of its own: the bounds put_items is
handed are the ones it applies, in the batch check and one item at a time alike, and PutStart parses
exactly to the declared limits."""

from __future__ import annotations

import pytest

from kvstore.errors import InvalidArgumentError
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v
from kvstore.rpc.data_requests import PUT_ITEM_BOUNDS, PutItem
from kvstore.rpc.schema import U64, plain_bounds

NARROW = {"key": "key", "size": (1, 10), "checksum": (0, 5)}  # bounds of another declaration


def test_the_bounds_are_the_declarations() -> None:
    assert tuple(PUT_ITEM_BOUNDS.values()) == plain_bounds(PutItem) == ("key", (1, 2**63 - 1), (0, U64))
    assert tuple(PUT_ITEM_BOUNDS) == PutItem._fields


@pytest.mark.parametrize(
    "item, message", [(["k", 11, 0], "size must be"), (["k", 10, 6], "checksum must be")]
)
@pytest.mark.parametrize("alone", [True, False])
def test_put_items_applies_the_bounds_it_is_handed(item: list, message: str, alone: bool) -> None:
    # alone: the batch check in C loops; beside a bad entry: the one-by-one check names the fault
    batch = [item] if alone else [item, ["other", 1, 1.5]]
    with pytest.raises(InvalidArgumentError, match=message):
        v.put_items({"items": batch}, NARROW)
    assert v.put_items({"items": [item]}, PUT_ITEM_BOUNDS) == [tuple(item)]  # the declaration's admit it


def test_within_narrow_bounds_items_pass_both_ways() -> None:
    items = [["a", 1, 0], ["b", 10, 5]]
    assert v.put_items({"items": items}, NARROW) == [("a", 1, 0), ("b", 10, 5)]
    with pytest.raises(InvalidArgumentError, match="each put item must be"):
        v.put_items({"items": [*items, "c"]}, NARROW)  # (the one-by-one path passes the good ones)


def request(size: int, checksum: int) -> dict:
    return {"client_id": "c", "items": [["k", size, checksum]], "replicas": 1}


def test_put_start_parses_to_the_declared_limits() -> None:
    top = m.PutStart.parse(request(2**63 - 1, U64))
    assert top.items == [PutItem("k", 2**63 - 1, U64)] and type(top.items[0]) is PutItem
    for size, checksum, message in (
        (2**63, 0, "size must be"),
        (0, 0, "size must be"),
        (1, U64 + 1, "checksum"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            m.PutStart.parse(request(size, checksum))
