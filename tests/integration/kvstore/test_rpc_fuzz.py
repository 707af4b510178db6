"""Fuzzing the master RPC (issue: no client can take the cluster down): random and mutated frames —
truncated, oversized length prefixes, wrong types, unknown methods, huge key lists, negative and
overflowing sizes — from an authenticated connection, and random bytes from an unauthenticated one. The
master answers each with an error or closes that connection, never crashes or hangs, and keeps serving
well-formed requests. The default run is short; `-m slow` runs a long soak (KVSTORE_FUZZ_EXAMPLES)."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvstore import Store, rpc
from kvstore.cluster.master_client import MasterClient
from kvstore.config.security import SecurityConfig
from kvstore.master.wire.server import EmbeddedMaster, Master
from kvstore.rpc import auth
from kvstore.rpc import messages as m

SECRET = SecurityConfig.load().secret()  # the suite's (tests/conftest.py)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=20,
)
param_names = st.sampled_from(
    [
        "keys",
        "key",
        "client_id",
        "items",
        "replicas",
        "force",
        "segment",
        "size",
        "version",
        "objects",
        "name",
    ]
)
requests = st.builds(
    lambda msg_id, method, params: rpc.pack([msg_id, method, params]),
    st.integers(-5, 2**64 - 1),
    st.one_of(st.sampled_from(sorted(m.REQUESTS)), st.text(max_size=20)),
    st.dictionaries(param_names, values, max_size=5),
)
length_prefix = st.builds(
    lambda n, body: struct.pack("<I", n) + body, st.integers(0, 2**32 - 1), st.binary(max_size=64)
)
frames = st.one_of(
    requests,
    requests.map(lambda f: f[: max(1, len(f) // 2)]),  # cut short
    length_prefix,
    st.binary(min_size=1, max_size=256),
)


@pytest.fixture(scope="module")
def master() -> Iterator[EmbeddedMaster]:
    embedded = Master.start_in_thread()
    yield embedded
    embedded.close()


def _send(address: str, payload: list[bytes], authenticate: bool) -> bytes:
    host, port = rpc.parse_address(address)
    received = b""
    with socket.create_connection((host, port), timeout=5) as s:
        s.settimeout(5)
        frames = None
        if authenticate:  # (outside the try: a refused handshake must fail the test)
            frames = auth.client_handshake(s, SECRET, address)
        try:
            for frame in payload:  # (sealed as a client would: what is fuzzed is what a member can send)
                s.sendall(frame if frames is None else frames.seal(frame))
            s.shutdown(socket.SHUT_WR)
            while chunk := s.recv(65536):
                received += chunk
        except OSError:
            pass  # cut off (reset, or shut down before we were): the expected answer to junk
    return received


def _still_serves(address: str) -> None:
    client = MasterClient(address, timeout=5)
    try:
        assert isinstance(client.call(m.Stats()), dict)
    finally:
        client.close()
    with Store.connect(address, segment_size=4 << 20) as store:
        store.put("after-the-fuzz", b"ok")
        assert store.get("after-the-fuzz") == b"ok"


def _fuzz(master: EmbeddedMaster, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(frames, min_size=1, max_size=4))
    def authenticated(payload: list[bytes]) -> None:
        _send(master.address, payload, authenticate=True)

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.one_of(frames, st.just(auth.MAGIC)), min_size=1, max_size=4))
    def unauthenticated(payload: list[bytes]) -> None:
        received = _send(master.address, payload, authenticate=False)
        assert len(received) in (0, auth.NONCE_SIZE)  # never a reply to a request

    authenticated()
    unauthenticated()
    _still_serves(master.address)


def test_the_master_survives_malformed_frames(master: EmbeddedMaster) -> None:
    _fuzz(master, 40)


def test_a_huge_key_list_is_a_clear_error_and_the_master_goes_on(master: EmbeddedMaster) -> None:
    frame = rpc.pack([1, "exists", {"keys": [f"k{i}" for i in range(300_000)]}])
    received = _send(master.address, [frame], authenticate=True)
    body = received[rpc.HEADER_SIZE : -auth.TAG_SIZE]  # (its MAC is checked by the client's tests)
    reply = rpc.unpack(body) if len(received) > rpc.HEADER_SIZE else None
    assert reply is None or reply[1] != 0 or isinstance(reply[3], (list, bytes))
    _still_serves(master.address)


@pytest.mark.slow
def test_the_master_survives_malformed_frames_long(master: EmbeddedMaster) -> None:
    _fuzz(master, int(os.environ.get("KVSTORE_FUZZ_EXAMPLES", "3000")))
