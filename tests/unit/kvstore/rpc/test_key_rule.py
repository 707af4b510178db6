"""The key rule of every request (kvstore.rpc.validate): a batch of plain keys passes in one check; any
bad key fails the request with the rule named, whatever its place in the batch."""

from __future__ import annotations

import pytest

from kvstore.errors import InvalidArgumentError
from kvstore.rpc import validate as v
from kvstore.rpc.data_requests import PUT_ITEM_BOUNDS

GOOD = ["a", "k" * v.MAX_KEY_BYTES, "блок/1", "é" * (v.MAX_KEY_BYTES // 2)]


class Str(str):
    pass


@pytest.mark.parametrize(
    "bad",
    ["", "k" * (v.MAX_KEY_BYTES + 1), "é" * (v.MAX_KEY_BYTES // 2 + 1), "\ud800", 7, None, b"k", Str("k")],
)
@pytest.mark.parametrize("where", [0, 2, 4])
def test_one_bad_key_fails_the_batch(bad: object, where: int) -> None:
    batch: list[object] = ["x", "y", "z", "w"]
    batch.insert(where, bad)
    assert not v.all_keys_ok(batch)
    with pytest.raises(InvalidArgumentError, match="keys must be"):
        v.keys({"keys": batch})


def test_good_keys_pass_as_they_are() -> None:
    assert v.all_keys_ok(GOOD) and v.all_keys_ok([])
    assert v.keys({"keys": GOOD}) == GOOD and v.keys({"keys": []}) == []


@pytest.mark.parametrize(
    "bad",
    [
        ["", 1, 1],
        ["k", 0, 1],
        ["k", 2**63, 1],
        ["k", True, 1],
        ["k", 1.0, 1],
        ["k", 1, -1],
        ["k", 1, 2**64],
        ["k", 1, None],
        ["k", 1],
        ("k", 1, 1),
        "k",
    ],
)
@pytest.mark.parametrize("where", [0, 2, 4])
def test_one_bad_put_item_fails_the_batch_as_it_fails_alone(bad: object, where: int) -> None:
    batch: list[object] = [["x", 1, 0], ["y", 2, 2**64 - 1], ["z", 2**63 - 1, 5], ["w", 4, 7]]
    batch.insert(where, bad)
    with pytest.raises(InvalidArgumentError) as alone:
        v.put_items({"items": [bad]}, PUT_ITEM_BOUNDS)
    with pytest.raises(InvalidArgumentError) as in_batch:
        v.put_items({"items": batch}, PUT_ITEM_BOUNDS)
    assert str(in_batch.value) == str(alone.value)


def test_plain_put_items_pass_as_tuples() -> None:
    items = [[k, i + 1, i] for i, k in enumerate(GOOD)]
    assert v.put_items({"items": items}, PUT_ITEM_BOUNDS) == [tuple(item) for item in items]
    assert v.put_items({"items": []}, PUT_ITEM_BOUNDS) == []


GOOD_RECORD = [0, 1, 2, "k", 4096, 2**64 - 1, False, 3]


@pytest.mark.parametrize(
    ("field", "bad"),
    [(0, -1), (1, 2**26 + 1), (2, 0), (3, ""), (4, 0), (5, 2**64), (6, 1), (7, 65), (0, True), (4, 1.5)],
)
def test_one_bad_restore_record_fails_the_batch_as_it_fails_alone(field: int, bad: object) -> None:
    from kvstore.rpc import messages as m

    record = list(GOOD_RECORD)
    record[field] = bad
    params = {"client_id": "n", "segment_id": 1, "last": True}
    with pytest.raises(InvalidArgumentError) as alone:
        m.RestoreSegment.parse({**params, "records": [record]})
    with pytest.raises(InvalidArgumentError) as in_batch:
        m.RestoreSegment.parse({**params, "records": [GOOD_RECORD, record, GOOD_RECORD]})
    assert str(in_batch.value) == str(alone.value)
    good = m.RestoreSegment.parse(
        {**params, "records": [GOOD_RECORD, [*GOOD_RECORD[:3], "é", *GOOD_RECORD[4:]]]}
    )
    # (a record without its trailing target, as a node of the previous version names it, reads target 0)
    assert good.records == [(*GOOD_RECORD, 0), (*GOOD_RECORD[:3], "é", *GOOD_RECORD[4:], 0)]
