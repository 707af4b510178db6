"""kvstore's transfer engine: registered memory, peer peers, batched READ/WRITE over tcp/shm/local."""

from transfer_engine.config import EngineConfig, TransportSettings, transport_names
from transfer_engine.engine import (
    BatchHandle,
    Op,
    Peer,
    Region,
    RemoteRegion,
    RequestState,
    TransferEngine,
)
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

__all__ = [
    "BatchHandle",
    "EngineClosedError",
    "EngineConfig",
    "InvalidArgumentError",
    "KVStoreError",
    "NoMemoryError",
    "NotFoundError",
    "NotSupportedError",
    "Op",
    "OutOfRangeError",
    "Peer",
    "PermissionDeniedError",
    "ProtocolError",
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
