"""Store errors: the transfer engine's hierarchy (one base, KVStoreError) plus the store's own kinds.

Codes below 100 are the core's (transfer_engine.errors); 100 and up belong to the store and travel in
master RPC replies. ``error_for_code`` is the single mapping from a code to an exception.
"""

from __future__ import annotations

from transfer_engine import errors as _core_errors
from transfer_engine.errors import (
    AddressInUseError,
    EngineClosedError,
    HostNotUsableError,
    InternalError,
    InvalidArgumentError,
    KVStoreError,
    NotFoundError,
    NotSupportedError,
    PermissionDeniedError,
    ProtocolError,
    StaleLocationError,
    TransferConnectionError,
    TransferFailedError,
    TransferTimeoutError,
)


class NoSpaceError(KVStoreError):
    """No segment can hold the value, even after evicting everything evictable."""

    code = 100


class ObjectExistsError(KVStoreError):
    """The key holds a different value; remove it first (same key + same bytes is not an error)."""

    code = 101


class ObjectBusyError(KVStoreError):
    """The object is leased to a reader or its put is still in progress."""

    code = 102


class MasterUnavailableError(KVStoreError, ConnectionError):
    code = 103


class ObjectNotFoundError(NotFoundError):
    code = 104


class NotEnoughSegmentsError(KVStoreError):
    """A put asks for more replicas than there are distinct usable segments that can hold the value
    (the rest are too small, gone, or suspected unreachable). Space may well exist: this is not NoSpace."""

    code = 105


class TooManyPutsError(KVStoreError):
    """This client's puts in progress (started, not ended or revoked) are at its limit, in objects or
    bytes (MasterConfig.client_put_objects / client_put_bytes): end or revoke some first."""

    code = 106


class TooManyConnectionsError(KVStoreError):
    """The master holds as many connections from this host as it allows
    (MasterConfig.max_connections_per_peer): close some, or raise the limit."""

    code = 107


class DeadlineExceededError(KVStoreError, TimeoutError):
    """A read's bytes did not arrive verified by the deadline its call was given (get_blocks and the
    batch gets' `deadline`): a miss, and no byte of it lands in the caller's buffers after the call
    returns."""

    code = 108


_STORE_ERRORS: dict[int, type[KVStoreError]] = {
    cls.code: cls
    for cls in (
        NoSpaceError,
        ObjectExistsError,
        ObjectBusyError,
        MasterUnavailableError,
        ObjectNotFoundError,
        NotEnoughSegmentsError,
        TooManyPutsError,
        TooManyConnectionsError,
        DeadlineExceededError,
    )
}


def error_for_code(code: int, message: str) -> KVStoreError:
    """The exception for any code, core or store."""
    cls = _STORE_ERRORS.get(code)
    return cls(message) if cls else _core_errors.error_for_code(code, message)


__all__ = [
    "AddressInUseError",
    "DeadlineExceededError",
    "EngineClosedError",
    "HostNotUsableError",
    "InternalError",
    "InvalidArgumentError",
    "KVStoreError",
    "MasterUnavailableError",
    "NoSpaceError",
    "NotEnoughSegmentsError",
    "NotFoundError",
    "NotSupportedError",
    "ObjectBusyError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "PermissionDeniedError",
    "ProtocolError",
    "StaleLocationError",
    "TooManyConnectionsError",
    "TooManyPutsError",
    "TransferConnectionError",
    "TransferFailedError",
    "TransferTimeoutError",
    "error_for_code",
]
