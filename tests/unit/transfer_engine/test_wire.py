from __future__ import annotations

import pytest

from transfer_engine import ProtocolError, _tools

READ, WRITE, HELLO, ERROR, PROOF, PROOF_ACK = 3, 5, 1, 7, 8, 9


def test_roundtrip() -> None:
    raw = _tools.encode_frame_header(READ, 0, 9, 2, 0xDEADBEEF, 4096, 1 << 20, 77, 1 << 62)
    assert len(raw) == _tools.FRAME_HEADER_SIZE
    h = _tools.decode_frame_header(raw)
    fields = ("opcode", "request_id", "region_id", "key", "offset", "length", "fence_slot", "fence_gen")
    assert tuple(h[f] for f in fields) == (READ, 9, 2, 0xDEADBEEF, 4096, 1 << 20, 77, 1 << 62)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "short"),
        (b"x" * 64, "magic"),
        (_tools.encode_frame_header(READ, length=0), "read length"),
        (_tools.encode_frame_header(READ, length=1 << 40), "read length"),
        (_tools.encode_frame_header(WRITE, length=0), "empty write"),
        (_tools.encode_frame_header(WRITE, length=(64 << 20) + 1), "payload"),
        (_tools.encode_frame_header(HELLO, length=5), "handshake frame of the wrong size"),
        (_tools.encode_frame_header(HELLO, length=0), "handshake frame of the wrong size"),
        (_tools.encode_frame_header(PROOF, length=1 << 20), "handshake frame of the wrong size"),
        (_tools.encode_frame_header(ERROR, length=5), "without payload"),
        (_tools.encode_frame_header(PROOF_ACK, length=5), "without payload"),
    ],
)
def test_rejects(raw: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        _tools.decode_frame_header(raw)


def test_unknown_opcode_and_version() -> None:
    raw = bytearray(_tools.encode_frame_header(READ, length=10))
    raw[5] = 99
    with pytest.raises(ProtocolError, match="opcode"):
        _tools.decode_frame_header(bytes(raw))
    raw[5] = READ
    raw[4] = 9
    with pytest.raises(ProtocolError, match="version"):
        _tools.decode_frame_header(bytes(raw))


@pytest.mark.parametrize("version", [1, 3, 4, 6, 0xFFFF])  # this engine speaks 5
def test_a_descriptor_of_another_version_is_a_clear_error(version: int) -> None:
    import struct

    raw = struct.pack("<IH", 0x4B565344, version) + bytes(64)  # "KVSD", then a version we do not speak
    with pytest.raises(ProtocolError, match=f"version {version} is not supported"):
        _tools.decode_descriptor(raw)


def test_the_engines_hmac_is_hmac_sha256() -> None:
    """The engine handshake's HMAC (common/hmac.h, no crypto library) agrees with Python's on keys and
    messages around the block size."""
    import hashlib
    import hmac
    import os

    from transfer_engine import _tools

    for size in (0, 1, 55, 56, 63, 64, 65, 119, 1000):
        for key in (b"", b"k", os.urandom(64), os.urandom(65), os.urandom(200)):
            message = os.urandom(size)
            assert _tools.hmac_sha256(key, message) == hmac.new(key, message, hashlib.sha256).digest()
