"""Fuzzing the tcp transport's server with well-keyed but hostile requests (issue 22, section 4): reads and
writes of a real region with out-of-bounds, wrapping and huge offsets and lengths, wrong keys, fences and
truncated frames, against a target whose region sits between PROT_NONE guard pages in a process of its
own: a byte read or written outside the region would kill it. It must answer errors, keep serving, and
hold the same bytes after (the fuzz only ever writes the byte the region holds).

The default run is short; `-m slow` runs the long soak (KVSTORE_FUZZ_EXAMPLES sets its size)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.raw_peer import PROOF_ACK, READ, WRITE, RawPeer, open_session
from transfer_engine import TransferEngine, _tools

PAGE = 4096
PAGES = 16
SIZE = PAGES * PAGE
HEADER = _tools.FRAME_HEADER_SIZE
FILL = 7

TARGET = f"""
import ctypes, mmap, sys
import numpy as np
from transfer_engine import TransferEngine
page, size = {PAGE}, {SIZE}
memory = mmap.mmap(-1, size + 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
for guard in (base, base + page + size):  # PROT_NONE on both sides of the region
    assert libc.mprotect(guard, page, 0) == 0, ctypes.get_errno()
region_bytes = np.frombuffer(memory, dtype=np.uint8, count=size, offset=page)
region_bytes[:] = {FILL}
with TransferEngine(transport="tcp", tcp_io_timeout=0.5) as engine:
    region = engine.register(region_bytes, export=True)
    print("READY", engine.name, region.id, flush=True)
    sys.stdin.read()
    print("SAME" if (region_bytes == {FILL}).all() else "CHANGED", flush=True)
"""


class Target:
    def __init__(self) -> None:
        root = Path(__file__).parents[2]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        ready, self.name, region = self.proc.stdout.readline().split()
        assert ready == "READY"
        self.region = int(region)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self) -> str:
        out, _ = self.proc.communicate("", timeout=30)
        return out.strip()


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[Target, str, dict]]:
    """The target, its tcp data address and a handshake session with it (the region's key in it: what an
    authenticated peer learns)."""
    t = Target()
    try:
        with TransferEngine(transport="tcp") as engine:
            peer = engine.open_peer(t.name)
            local = engine.allocate(SIZE)
            engine.read(local.addr, peer, t.region, 0, SIZE)
            assert local.array is not None and (local.array == FILL).all()
            data = engine.paths(peer)[0].remote_address
        yield t, data, open_session(t.name)
    finally:
        if t.alive():
            t.proc.kill()


edges = st.sampled_from(
    [0, 1, PAGE - 1, PAGE, SIZE - 1, SIZE, SIZE + 1, SIZE + PAGE, 2**63, 2**64 - 1, 2**64 - SIZE]
)
offsets = st.one_of(edges, st.integers(0, 2**64 - 1), st.integers(0, 2 * SIZE))
lengths = st.one_of(edges, st.integers(0, 2 * SIZE), st.integers(0, 2**64 - 1))


def _frame(op: int, region: int, key: int, offset: int, length: int, slot: int, gen: int) -> bytes:
    header = _tools.encode_frame_header(op, 0, 1, region, key, offset, length, slot, gen)
    if op == WRITE and length <= 2 * SIZE:
        return header + bytes([FILL]) * length
    return header


def _send(data_address: str, session: dict, frames: list[bytes], cut: int | None) -> None:
    with RawPeer(data_address, timeout=2) as peer:
        sock = peer.sock
        assert peer.authenticate(session)["opcode"] == PROOF_ACK
        sock.settimeout(1.0)
        try:
            stream = b"".join(frames)
            sock.sendall(stream if cut is None else stream[:cut])  # (cut: a frame truncated)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(1 << 16):
                pass
        except OSError:
            pass  # cut off: an answer to a bad frame


def _fuzz(target: tuple[Target, str, dict], examples: int) -> None:
    t, data, session = target
    key = session["keys"][t.region]

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.lists(
            st.tuples(
                st.sampled_from([READ, WRITE]),
                st.sampled_from([t.region, t.region + 1, 0]),
                st.sampled_from([key, key ^ 1, 0]),
                offsets,
                lengths,
                st.sampled_from([0, 1, 2**32 - 1]),
                st.sampled_from([0, 1, 2**64 - 1]),
            ),
            min_size=1,
            max_size=4,
        ),
        st.one_of(st.none(), st.integers(0, HEADER * 4)),
    )
    def run(requests: list[tuple[int, int, int, int, int, int, int]], cut: int | None) -> None:
        _send(data, session, [_frame(*r) for r in requests], cut)
        assert t.alive(), "the target died: a request reached memory outside its region"

    run()
    with TransferEngine(transport="tcp") as engine:  # it still serves, the whole region, unchanged
        peer = engine.open_peer(t.name)
        local = engine.allocate(SIZE)
        engine.read(local.addr, peer, t.region, 0, SIZE)
        assert local.array is not None and np.all(local.array == FILL)


def test_hostile_requests_touch_nothing_outside_the_region(target: tuple[Target, str, dict]) -> None:
    _fuzz(target, 150)
    assert target[0].alive()


@pytest.mark.slow
def test_hostile_requests_touch_nothing_outside_the_region_long(target: tuple[Target, str, dict]) -> None:
    _fuzz(target, int(os.environ.get("KVSTORE_FUZZ_EXAMPLES", "5000")))


def test_the_guarded_target_is_unchanged_at_the_end(target: tuple[Target, str, dict]) -> None:
    t, data, session = target
    key = session["keys"][t.region]
    _send(data, session, [_frame(WRITE, t.region, key, SIZE - 8, 16, 0, 0)], None)  # straddles the end
    assert t.alive()
    assert t.finish() == "SAME"
