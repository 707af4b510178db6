"""Human sizes ("4GiB", "512KiB", "1MB") and durations for config and CLI arguments."""

from __future__ import annotations

import re

from transfer_engine.errors import InvalidArgumentError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
MAX_SIZE = 1 << 62
"""Largest size anything accepts (sizes cross into C++ as signed 64-bit numbers)."""
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string such as "4GiB" (binary), "1MB" (decimal) or "512k" (binary)."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"not a size: {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE_RE.match(str(value))
        if not match or match.group(2).lower() not in _UNITS:
            raise InvalidArgumentError(f"not a size: {value!r} (use e.g. 4096, 512KiB, 4GiB)")
        size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if not 0 <= size <= MAX_SIZE:
        raise InvalidArgumentError(f"size out of range: {value!r} (0 .. 4 EiB)")
    return size


def format_size(n: int) -> str:
    """Shortest exact binary form: 1048576 -> "1MiB"."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{unit}"
    return f"{n}B"
