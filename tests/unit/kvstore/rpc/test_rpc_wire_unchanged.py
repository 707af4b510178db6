"""Declaring each request once changed neither the wire nor the validation: a fixed corpus of request
parameters (every method, good, and each field spoiled in turn with wrong types, bounds and odd values)
parses to the same request fields, or fails with the same error class and message, as the hand-written
parsers did; replies decode the same; and a parsed request goes back on the wire as the same bytes. The
outcomes were recorded from the parsers before the change (tests/helpers/rpc_wire_corpus.py)."""

from __future__ import annotations

import ast
import pathlib

import pytest

from kvstore import rpc
from kvstore.rpc import messages as m
from tests.helpers import rpc_wire_corpus as corpus

GOLDEN = pathlib.Path(corpus.__file__).with_name("rpc_wire_golden.txt").read_text().splitlines()


def test_the_corpus_is_the_recorded_one() -> None:
    assert GOLDEN[0] == corpus.corpus_digest()


def test_every_method_is_in_the_corpus() -> None:
    assert set(corpus.GOOD) == set(m.REQUESTS)


def test_every_request_parses_as_before() -> None:
    cases = list(corpus.cases())
    recorded = [ast.literal_eval(line) for line in GOLDEN[1 : 1 + len(cases)]]
    differ = [
        (method, params, was, now)
        for (method, params), was in zip(cases, recorded, strict=True)
        if (now := corpus.outcome(method, params)) != was
    ]
    assert not differ, f"{len(differ)} of {len(cases)} differ; the first: {differ[0]}"


def test_every_reply_decodes_as_before() -> None:
    replies = list(corpus.reply_cases())
    recorded = [ast.literal_eval(line) for line in GOLDEN[-len(replies) :]]
    differ = [
        (method, reply, was, now)
        for (method, reply), was in zip(replies, recorded, strict=True)
        if (now := corpus.reply_outcome(method, reply)) != was
    ]
    assert not differ, f"{len(differ)} of {len(replies)} differ; the first: {differ[0]}"


@pytest.mark.parametrize("method", sorted(corpus.GOOD))
def test_a_parsed_request_goes_back_as_the_same_bytes(method: str) -> None:
    """A request's params() puts the fields the old parse made, in their order, on the wire byte for byte
    (the corpus's first case of each method is its good parameters)."""
    first = [method for method, _ in corpus.cases()].index(method)
    kind, name, fields = ast.literal_eval(GOLDEN[1 + first])
    request = m.parse_request(method, corpus.GOOD[method][0])
    assert (kind, name) == ("ok", type(request).__name__)
    assert rpc.pack([7, request.METHOD, request.params()]) == rpc.pack([7, method, fields])
