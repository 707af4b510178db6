"""kvstore: a distributed KV-cache store for LLM inference.

The client's names (Store, MISS...) are imported on first use: a master, or a tool that imports only
kvstore.errors or kvstore.config, never loads the transfer engine's extension."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

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
from transfer_engine.lazy import lazy_names
from transfer_engine.source_tree import refuse_unbuilt_extensions

refuse_unbuilt_extensions(sys.modules[__name__])  # (a clone's tree shadowing the installed package)

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

__getattr__ = lazy_names(__name__, _LAZY)
