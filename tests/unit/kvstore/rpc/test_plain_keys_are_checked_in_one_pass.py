"""Every keyed request's keys are checked in one C++ pass (kvstore._meta.plain_keys behind
kvstore.rpc.validate._plain_keys): the same answer as the rule it replaced (every value an exact str, non-
empty, ASCII, at most MAX_KEY_BYTES long), for every mix of values a peer can send, and a batch that is not
plain still goes key by key (validate.keys names the error)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.errors import InvalidArgumentError
from kvstore.rpc import validate
from kvstore.rpc.validate import MAX_KEY_BYTES, _plain_keys


class Name(str):
    """A str subclass: not plain (the rule asks for exact strs)."""


def the_rule(values: list[Any]) -> bool:
    """The check as it was written in Python (map, set, join)."""
    if not values:
        return True
    if set(map(type, values)) != {str}:
        return False
    lengths = list(map(len, values))
    return min(lengths) > 0 and max(lengths) <= MAX_KEY_BYTES and "".join(values).isascii()


values = st.one_of(
    st.text(st.characters(max_codepoint=127), max_size=12),
    st.text(max_size=6),  # (non-ASCII, surrogates included)
    st.sampled_from(["", "a" * MAX_KEY_BYTES, "a" * (MAX_KEY_BYTES + 1), "é", "\x00", "\x7f"]),
    st.builds(Name, st.text(st.characters(max_codepoint=127), min_size=1, max_size=4)),
    st.binary(max_size=4),
    st.integers(),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=2), max_size=2),
)


@settings(max_examples=2000)
@given(st.lists(values, max_size=8))
def test_the_one_pass_answers_as_the_rule(batch: list[Any]) -> None:
    assert _plain_keys(batch) == the_rule(batch)


def test_lengths_at_the_bound_and_past_it() -> None:
    assert _plain_keys(["k" * MAX_KEY_BYTES, "a"]) and _plain_keys([])
    assert not _plain_keys(["a", "k" * (MAX_KEY_BYTES + 1)])
    assert not _plain_keys(["a", ""])


def test_a_batch_that_is_not_plain_is_checked_key_by_key() -> None:
    # A non-ASCII key within the bound in UTF-8 is a key; the batch is not plain, so each is checked.
    assert validate.keys({"keys": ["a", "é" * 10]}) == ["a", "é" * 10]
    for bad in (["a", ""], ["a", Name("b")], ["a", b"b"], ["é" * MAX_KEY_BYTES]):
        with pytest.raises(InvalidArgumentError):
            validate.keys({"keys": bad})
