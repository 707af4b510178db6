"""validate.put_items reads a put item's bounds by field name and its errors say the bounds it was
handed (PutItem's declaration, kvstore.rpc.data_requests), not a rule written into the message: a
narrower declaration's bounds appear in the error as they are, and PutStart's errors name the declared
limits."""

from __future__ import annotations

import pytest

from kvstore.errors import InvalidArgumentError
from kvstore.rpc import messages as m
from kvstore.rpc import validate as v
from kvstore.rpc.data_requests import PUT_ITEM_BOUNDS
from kvstore.rpc.schema import U64

# Bounds of another declaration, its fields in another order in the mapping's values: read by name.
NARROW = {"key": "key", "size": (3, 10), "checksum": (2, 5)}


@pytest.mark.parametrize(
    "item, message",
    [
        (["k", 11, 2], "size must be an integer in [3, 10]"),
        (["k", 2, 2], "size must be an integer in [3, 10]"),
        (["k", 3, 6], "checksum must be an integer in [2, 5]"),
        (["k", 3, True], "checksum must be an integer in [2, 5]"),
        (["k", 3], "each put item must be [key, size, checksum]"),
    ],
)
def test_an_error_names_the_field_and_the_bound_it_was_handed(item: list, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as error:
        v.put_items({"items": [item, ["ok", 3, 2]]}, NARROW)
    assert str(error.value) == message


def test_the_bounds_are_read_by_name() -> None:
    """Only size's bound is narrowed: a checksum beyond it passes; the same bound given as checksum's
    stops it."""
    size_only = {**PUT_ITEM_BOUNDS, "size": (1, 10)}
    assert v.put_items({"items": [["k", 10, U64]]}, size_only) == [("k", 10, U64)]
    with pytest.raises(InvalidArgumentError, match=r"checksum must be an integer in \[0, 10\]"):
        v.put_items({"items": [["k", 10, 11], "x"]}, {**PUT_ITEM_BOUNDS, "checksum": (0, 10)})


def test_put_start_names_the_declared_limits() -> None:
    request = {"client_id": "c", "items": [["k", 0, 0]], "replicas": 1}
    with pytest.raises(InvalidArgumentError, match=rf"size must be an integer in \[1, {2**63 - 1}\]"):
        m.PutStart.parse(request)
    request["items"] = [["k", 1, U64 + 1]]
    with pytest.raises(InvalidArgumentError, match=rf"checksum must be an integer in \[0, {U64}\]"):
        m.PutStart.parse(request)
