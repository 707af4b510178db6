"""A batch column given as a numpy array of another dtype: numpy casts silently (an int64 -1 becomes
2**64 - 1 as a uint64 generation, which would keep a fenced slot alive for every generation; 2.7 becomes
2), so such an array is taken only when every value is an integer (or bool) the column's type holds."""

from __future__ import annotations

import numpy as np
import pytest

from transfer_engine.engine import _as_column
from transfer_engine.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        (np.array([3, -1], dtype=np.int64), np.uint64),
        (np.array([1 << 40], dtype=np.uint64), np.uint32),
        (np.array([2.7]), np.uint64),
        (np.array(["1"]), np.uint32),
    ],
)
def test_an_array_of_values_the_column_cannot_hold_is_refused(values: np.ndarray, dtype: type) -> None:
    with pytest.raises(InvalidArgumentError, match="batch column"):
        _as_column(values, dtype)


def test_arrays_and_lists_that_fit_are_taken_as_they_are() -> None:
    same = np.arange(4, dtype=np.uint64)
    assert np.array_equal(_as_column(same, np.uint64), same)
    assert _as_column(np.array([0, 7], dtype=np.int64), np.uint32).tolist() == [0, 7]
    assert _as_column(np.array([True, False]), np.uint8).tolist() == [1, 0]
    assert _as_column([5, 6], np.uint64).tolist() == [5, 6]
    assert _as_column(np.zeros(0, dtype=np.int64), np.uint64).size == 0
    with pytest.raises(InvalidArgumentError):
        _as_column([-1], np.uint64)  # (a list: numpy itself refuses it)
