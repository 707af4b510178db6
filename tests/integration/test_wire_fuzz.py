"""Fuzzing the TCP wire decoder and a live engine's handshake endpoint and tcp data server with malformed
frames from a peer that never authenticated: clean errors, no crash, nothing served.

The default run is short; `-m slow` runs the long soak (KVSTORE_FUZZ_EXAMPLES sets its size).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transfer_engine import ProtocolError, TransferEngine, _tools

HEADER = _tools.FRAME_HEADER_SIZE
MAGIC = struct.pack("<I", 0x5453564B)

WIRE_VERSION = 4
# Headers that pass the magic/version check most of the time, so fuzzing reaches the field checks.
plausible_headers = st.builds(
    lambda opcode, flags, rest: MAGIC + bytes([WIRE_VERSION, opcode]) + flags + rest,
    st.integers(0, 255),
    st.sampled_from([b"\x00\x00", b"\x01\x00"]),
    st.binary(min_size=HEADER - 8, max_size=HEADER - 8),
)
any_bytes = st.binary(min_size=0, max_size=2 * HEADER)


def _decode_is_clean(data: bytes) -> None:
    try:
        header = _tools.decode_frame_header(data, 1 << 20)
    except ProtocolError:
        return
    # Accepted headers are well-formed: a known opcode and a payload within the limit.
    assert 1 <= header["opcode"] <= 9
    assert header["length"] <= 1 << 20
    assert len(data) == HEADER


@settings(max_examples=400, deadline=None)
@given(st.one_of(plausible_headers, any_bytes))
def test_decoder_rejects_cleanly(data: bytes) -> None:
    _decode_is_clean(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_descriptor_decoder_rejects_cleanly(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        _tools.decode_descriptor(data)


@pytest.fixture(scope="module")
def served() -> TransferEngine:
    engine = TransferEngine(tcp_io_timeout=0.5)
    region = engine.allocate(1 << 20)
    assert region.array is not None
    region.array[:] = 7
    yield engine
    engine.close()


def _send_junk(name: str, frames: list[bytes]) -> None:
    host, port = name.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        sock.settimeout(1.0)
        try:
            for frame in frames:
                sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # the server may cut us off: that is the expected answer to junk


def _still_serves(engine: TransferEngine) -> None:
    with TransferEngine(transport="tcp") as client:
        segment = client.open_peer(engine.name)
        local = client.allocate(4096)
        client.read(local.addr, segment, segment.regions[0].id, 0, 4096)
        assert local.array is not None and np.all(local.array == 7)


def _live_fuzz(served: TransferEngine, examples: int) -> None:
    data = served._core_engine().descriptor()["transports"]["tcp"]["address"]

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.sampled_from([served.name, data]), st.lists(st.one_of(plausible_headers, any_bytes), max_size=4)
    )
    def run(address: str, frames: list[bytes]) -> None:
        _send_junk(address, frames)

    run()
    _still_serves(served)


def test_live_server_survives_junk(served: TransferEngine) -> None:
    _live_fuzz(served, 60)


@pytest.mark.slow
def test_live_server_survives_junk_long(served: TransferEngine) -> None:
    _live_fuzz(served, int(os.environ.get("KVSTORE_FUZZ_EXAMPLES", "5000")))
