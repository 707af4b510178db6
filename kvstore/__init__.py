"""kvstore: a distributed KV-cache store for LLM inference."""

from kvstore.client.store import MISS, OK, PutResult, result_error
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
from kvstore.store import Store

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
