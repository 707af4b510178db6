"""Argument types of the `kvstore` command's options (argparse `type=`): sizes, bounded numbers, addresses,
transports, each a clear error naming what was wrong."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from transfer_engine.errors import KVStoreError
from transfer_engine.units import parse_size


def size(text: str) -> int:
    try:
        value = parse_size(text)
    except KVStoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive")
    return value


def number(kind: type, low: float, high: float, what: str) -> Callable[[str], Any]:
    """An argparse type: parses `kind` and checks low <= value <= high (NaN fails)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from exc
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} out of range: {text}")
        return value

    return parse


positive_int = number(int, 1, 2**31, "a positive integer")
positive_float = number(float, 1e-9, 1e9, "a positive number")
non_negative_float = number(float, 0.0, 1e12, "a number >= 0")
port = number(int, 0, 65535, "a port (0..65535)")
hash_seed = number(int, 0, 2**64 - 1, "a seed in [0, 2^64)")


def host_port(text: str) -> str:
    from kvstore.rpc import parse_address

    try:
        parse_address(text)
    except KVStoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def host_ports(text: str) -> str:
    """HOST:PORT[,HOST:PORT...]."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...], got {text!r}")
    return ",".join(host_port(p) for p in parts)


def transport(value: str) -> str:
    """A --transport value: auto or a registered transport (checked when given, so that building the
    parser does not load the transfer engine's extension: the master's process never needs it)."""
    from transfer_engine.config import transport_choices

    if value not in transport_choices():
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {', '.join(transport_choices())})"
        )
    return value
