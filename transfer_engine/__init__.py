"""kvstore's transfer engine: registered memory, peer peers, batched READ/WRITE over tcp/shm/local.

Importing the package (or its errors, settings or security) does not load the data-plane extension
(`_core`): the engine's names are imported on first use, so a master or a tool that only needs the
errors and settings never carries the engine."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from transfer_engine.errors import (
    EngineClosedError,
    InvalidArgumentError,
    KVStoreError,
    NoMemoryError,
    NotFoundError,
    NotSupportedError,
    OutOfRangeError,
    PermissionDeniedError,
    ProtocolError,
    StaleLocationError,
    TransferConnectionError,
    TransferFailedError,
    TransferTimeoutError,
)
from transfer_engine.lazy import lazy_names
from transfer_engine.source_tree import refuse_unbuilt_extensions

refuse_unbuilt_extensions(sys.modules[__name__])  # (a clone's tree shadowing the installed package)

__all__ = [
    "BatchHandle",
    "EngineClosedError",
    "EngineConfig",
    "EngineSecurity",
    "InvalidArgumentError",
    "KVStoreError",
    "NicAddress",
    "NoMemoryError",
    "NotFoundError",
    "NotSupportedError",
    "Op",
    "OutOfRangeError",
    "PathInfo",
    "Peer",
    "PermissionDeniedError",
    "ProtocolError",
    "ReadCheck",
    "Region",
    "RemoteRegion",
    "RequestState",
    "StaleLocationError",
    "TransferConnectionError",
    "TransferEngine",
    "TransferFailedError",
    "TransferTimeoutError",
    "TransportSettings",
    "transport_names",
]

# Where each lazily imported name lives.
_LAZY = {
    **dict.fromkeys(("EngineConfig", "TransportSettings", "transport_names"), "transfer_engine.config"),
    **dict.fromkeys(
        (
            "BatchHandle",
            "NicAddress",
            "Op",
            "PathInfo",
            "Peer",
            "ReadCheck",
            "Region",
            "RemoteRegion",
            "RequestState",
            "TransferEngine",
        ),
        "transfer_engine.engine",
    ),
    "EngineSecurity": "transfer_engine.security",
}

if TYPE_CHECKING:
    from transfer_engine.config import EngineConfig, TransportSettings, transport_names
    from transfer_engine.engine import (
        BatchHandle,
        NicAddress,
        Op,
        PathInfo,
        Peer,
        ReadCheck,
        Region,
        RemoteRegion,
        RequestState,
        TransferEngine,
    )
    from transfer_engine.security import EngineSecurity

__getattr__ = lazy_names(__name__, _LAZY)
