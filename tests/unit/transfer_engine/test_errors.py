from __future__ import annotations

import pytest

from transfer_engine import (
    InvalidArgumentError,
    KVStoreError,
    NotFoundError,
    ProtocolError,
    TransferConnectionError,
    TransferEngine,
    _core,
    _tools,
)
from transfer_engine.errors import CODE_NAMES, InternalError, error_for_code


def test_every_core_code_maps_to_a_named_class() -> None:
    for name in dir(_core):
        if name.startswith("CODE_"):
            code = getattr(_core, name)
            assert CODE_NAMES[code] == name[len("CODE_") :]
            if code:
                assert isinstance(error_for_code(code, "x"), KVStoreError)


def test_unknown_code_is_internal() -> None:
    assert isinstance(error_for_code(999, "x"), InternalError)


def test_core_errors_arrive_as_the_hierarchy(engine: TransferEngine) -> None:
    with pytest.raises(TransferConnectionError):
        engine.open_peer("127.0.0.1:1", "tcp")
    with pytest.raises(InvalidArgumentError):
        engine.open_peer("no-port-here")
    with pytest.raises(NotFoundError):
        engine.unregister(424242)
    with pytest.raises(ProtocolError):
        _tools.decode_frame_header(b"short")
    assert issubclass(InvalidArgumentError, ValueError)  # stdlib-friendly catching
