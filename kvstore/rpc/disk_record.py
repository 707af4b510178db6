"""The disk record format: how one object lies in a node's disk file. The master places records
(record_bytes), the node writes and checks them (write_header, header_matches), and a reader on the
disk's host reads their bytes (data_offset); this module is the one place that knows the layout.

A record is one header page (magic, size, checksum, key length, key, and the hash of the page before its
last 8 bytes in those bytes), then the object's bytes padded to whole pages. Records start on a page.
"""

from __future__ import annotations

import struct

import numpy as np
import xxhash

PAGE = 4096  # direct-I/O unit: records start and end on it
MAGIC = b"KVSDISK1"
_FIXED = struct.Struct("<8sQQI")  # magic, size, checksum, key length; then the key; the hash is last
MAX_KEY_BYTES = PAGE - _FIXED.size - 8


def pages(nbytes: int) -> int:
    """nbytes rounded up to whole pages."""
    return -(-nbytes // PAGE) * PAGE


def record_bytes(size: int) -> int:
    """Disk space of one object's record: its header page, then its bytes, page-padded."""
    return PAGE + pages(size)


def data_offset(record_offset: int) -> int:
    """Where the object's bytes start in the file, for the record at record_offset."""
    return record_offset + PAGE


def write_header(page: np.ndarray, key: str, size: int, checksum: int) -> bool:
    """Fills one header page (a uint8 array of PAGE bytes); False when the key does not fit in it."""
    raw = key.encode()
    if len(raw) > MAX_KEY_BYTES:
        return False
    page[:] = 0
    head = _FIXED.pack(MAGIC, size, checksum, len(raw)) + raw
    page[: len(head)] = np.frombuffer(head, np.uint8)
    digest = struct.pack("<Q", xxhash.xxh3_64_intdigest(page[: PAGE - 8].data))
    page[PAGE - 8 :] = np.frombuffer(digest, np.uint8)
    return True


def header_matches(page: np.ndarray, key: str, size: int, checksum: int) -> bool:
    """The header page is intact and names exactly this object."""
    (stored,) = struct.unpack("<Q", page[PAGE - 8 :].tobytes())
    if stored != xxhash.xxh3_64_intdigest(page[: PAGE - 8].data):
        return False
    magic, got_size, got_checksum, key_len = _FIXED.unpack(page[: _FIXED.size].tobytes())
    raw = page[_FIXED.size : _FIXED.size + key_len].tobytes() if key_len <= MAX_KEY_BYTES else b""
    return magic == MAGIC and got_size == size and got_checksum == checksum and raw == key.encode()
