"""The one exception hierarchy of kvstore, and the one place where core status codes map onto it.

``kvstore`` re-exports these classes; ``transfer_engine`` owns them because it is the lower layer.
"""

from __future__ import annotations


class KVStoreError(Exception):
    """Base class of every error raised by kvstore and its transfer engine."""

    code: int = 12  # INTERNAL


class InvalidArgumentError(KVStoreError, ValueError):
    code = 1


class NotFoundError(KVStoreError, LookupError):
    code = 2


class PermissionDeniedError(KVStoreError, PermissionError):
    code = 3


class OutOfRangeError(KVStoreError, IndexError):
    code = 4


class ProtocolError(KVStoreError):
    """A peer sent bytes that do not follow the wire protocol."""

    code = 5


class TransferConnectionError(KVStoreError, ConnectionError):
    code = 6


class TransferTimeoutError(KVStoreError, TimeoutError):
    code = 7


class NoMemoryError(KVStoreError, MemoryError):
    code = 8


class NotSupportedError(KVStoreError):
    code = 9


class StorageIOError(KVStoreError, OSError):
    code = 10


class EngineClosedError(KVStoreError):
    code = 11


class InternalError(KVStoreError):
    code = 12


class StaleLocationError(KVStoreError):
    """The allocation a transfer named was freed (fenced off by its owner): ask for a fresh location."""

    code = 13


class TransferFailedError(KVStoreError):
    """Some requests of a synchronous transfer did not complete; ``states``/``errors`` say which."""

    def __init__(self, message: str, states: object = None, errors: object = None) -> None:
        super().__init__(message)
        self.states = states
        self.errors = errors


_BY_CODE: dict[int, type[KVStoreError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        PermissionDeniedError,
        OutOfRangeError,
        ProtocolError,
        TransferConnectionError,
        TransferTimeoutError,
        NoMemoryError,
        NotSupportedError,
        StorageIOError,
        EngineClosedError,
        InternalError,
        StaleLocationError,
    )
}

CODE_NAMES = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "NOT_FOUND",
    3: "PERMISSION_DENIED",
    4: "OUT_OF_RANGE",
    5: "PROTOCOL_ERROR",
    6: "CONNECTION_FAILED",
    7: "TIMED_OUT",
    8: "NO_MEMORY",
    9: "NOT_SUPPORTED",
    10: "IO_ERROR",
    11: "CLOSED",
    12: "INTERNAL",
    13: "STALE",
}


def error_for_code(code: int, message: str) -> KVStoreError:
    """Builds the exception for a core status code (called by the C++ binding, too)."""
    return _BY_CODE.get(code, InternalError)(message)
