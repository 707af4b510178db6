"""The master's handler of a request is its method named by the request's METHOD (kvstore.rpc.schema):
the handler table is derived, every request has a handler taking it and every handler a request, and a
request declared without a handler stops the master when its handlers are made, not at the first call."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated, ClassVar

import pytest

from kvstore.config import MasterConfig
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.state import MasterState
from kvstore.rpc import messages as m
from kvstore.rpc import schema


def _handlers() -> Handlers:
    return Handlers(MasterState(MasterConfig.load()))


def _public_methods() -> set[str]:
    return {name for name, _ in inspect.getmembers(Handlers, inspect.isfunction) if not name.startswith("_")}


def test_every_request_has_its_handler_and_every_handler_a_request() -> None:
    assert _public_methods() - {"handle"} == set(m.REQUESTS)
    handlers = _handlers()
    for cls in m.REQUESTS.values():
        assert handlers.by_type[cls].__name__ == cls.METHOD


def test_each_handler_takes_its_request() -> None:
    for cls in m.REQUESTS.values():
        params = list(inspect.signature(getattr(Handlers, cls.METHOD)).parameters.values())
        assert params[1].annotation == f"m.{cls.__name__}", cls.METHOD  # (self, r: m.<Request>, ...)


def test_a_request_without_a_handler_stops_the_master_at_start() -> None:
    @schema.request
    @dataclass
    class Unhandled(m.Request):
        METHOD: ClassVar[str] = "unhandled_for_test"
        keys: Annotated[list[str], schema.Keys()]

    try:
        with pytest.raises(AttributeError, match="unhandled_for_test"):
            _handlers()
    finally:
        del m.REQUESTS[Unhandled.METHOD]
    assert set(m.REQUESTS) == _public_methods() - {"handle"}


def test_handle_answers_by_the_method_named() -> None:
    handlers = _handlers()
    assert handlers.handle("exists", {"keys": ["a", "b"]}) == [False, False]
    # (a one-shard master's reply is the two fields it always was)
    assert handlers.handle("hello", {"version": m.PROTOCOL_VERSION}) == (m.PROTOCOL_VERSION, 0)
