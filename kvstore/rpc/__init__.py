"""The master's RPC: framing (length-prefixed msgpack) and the typed messages of every method."""

from kvstore.rpc.framing import (
    HEADER_SIZE,
    MAX_FRAME,
    FrameError,
    Packed,
    frame_length,
    pack,
    parse_address,
    parse_request,
    parse_response,
    unpack,
)

__all__ = [
    "HEADER_SIZE",
    "MAX_FRAME",
    "FrameError",
    "Packed",
    "frame_length",
    "pack",
    "parse_address",
    "parse_request",
    "parse_response",
    "unpack",
]
