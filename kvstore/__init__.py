"""kvstore: a distributed KV-cache store for LLM inference.

The client's names (Store, MISS...) are imported on first use: a master, or a tool that imports only
kvstore.errors or kvstore.config, never loads the transfer engine's extension."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    MasterUnavailableError,
    NoSpaceError,
    NotEnoughSegmentsError,
    NotFoundError,
    ObjectBusyError,
    ObjectExistsError,
    ObjectNotFoundError,
    PermissionDeniedError,
    StaleLocationError,
    TooManyPutsError,
    TransferFailedError,
    TransferTimeoutError,
)

__version__ = "0.1.0"
__all__ = [
    "MISS",
    "OK",
    "InvalidArgumentError",
    "KVStoreError",
    "MasterUnavailableError",
    "NoSpaceError",
    "NotEnoughSegmentsError",
    "NotFoundError",
    "ObjectBusyError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "PermissionDeniedError",
    "PutResult",
    "StaleLocationError",
    "Store",
    "TooManyPutsError",
    "TransferFailedError",
    "TransferTimeoutError",
    "__version__",
    "result_error",
]

_LAZY = {
    **dict.fromkeys(("MISS", "OK", "PutResult", "result_error"), "kvstore.client.store"),
    "Store": "kvstore.store",
}

if TYPE_CHECKING:
    from kvstore.client.store import MISS, OK, PutResult, result_error
    from kvstore.store import Store


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # (looked up once)
    return value
