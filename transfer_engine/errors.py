"""The one exception hierarchy of kvstore, and the one place where core status codes map onto it.

``kvstore`` re-exports these classes; ``transfer_engine`` owns them because it is the lower layer.
"""

from __future__ import annotations

import errno
import socket


class KVStoreError(Exception):
    """Base class of every error raised by kvstore and its transfer engine."""

    code: int = 12  # INTERNAL


class InvalidArgumentError(KVStoreError, ValueError):
    code = 1


class AddressInUseError(InvalidArgumentError):
    """A port this process was told to listen on is taken (by another process, or another listener of
    this one). `setting` names what sets it (a flag, a variable), for the message; local, never on a wire."""

    def __init__(self, host: str, port: int, setting: str = "") -> None:
        self.host, self.port, self.setting = host, port, setting
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        change = f"set {setting} to another port" if setting else "choose another port"
        super().__init__(
            f"cannot listen on {where}: the port is already in use (is another kvstore running?); "
            f"{change}, or 0 to pick a free one"
        )

    def naming(self, setting: str) -> AddressInUseError:
        """The same error, saying which setting to change."""
        return AddressInUseError(self.host, self.port, setting)


class HostNotUsableError(InvalidArgumentError):
    """A host this process was told to listen on is not one of this machine's addresses, or its name does
    not resolve. `setting` names what sets it (a flag, a variable), for the message; local, not on a wire."""

    def __init__(self, host: str, port: int, reason: str, setting: str = "") -> None:
        self.host, self.port, self.reason, self.setting = host, port, reason, setting
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        change = f"set {setting} to" if setting else "listen on"
        super().__init__(
            f"cannot listen on {where}: {reason}; {change} an address of this host "
            "(127.0.0.1, one of its interfaces' addresses, or 0.0.0.0 for all)"
        )

    def naming(self, setting: str) -> HostNotUsableError:
        """The same error, saying which setting to change."""
        return HostNotUsableError(self.host, self.port, self.reason, setting)

    @classmethod
    def of(cls, exc: OSError, host: str, port: int) -> HostNotUsableError | None:
        """The error for a failed bind or name lookup of `host`, when that is what `exc` says; else None."""
        if isinstance(exc, socket.gaierror):
            return cls(host, port, f"the name {host!r} does not resolve ({exc.strerror or exc})")
        if exc.errno == errno.EADDRNOTAVAIL:
            return cls(host, port, f"{host!r} is not an address of this host")
        return None


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
