"""Signals handled in the process (Python installs handlers: pytest-timeout, asyncio, uvloop, servers) make
a blocking system call on any thread return EINTR. Handshakes and transfers carry on through them: a CI
run once failed `open_peer` over shm with "same-host handshake cut short" because a recvmsg was cut short."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from transfer_engine import TransferEngine


@pytest.fixture
def signal_storm() -> Iterator[None]:
    """SIGUSR1 at this process every ~0.2 ms, with a Python handler (so it interrupts system calls)."""
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    stop = threading.Event()

    def pester() -> None:
        while not stop.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0002)

    thread = threading.Thread(target=pester, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_handshakes_and_transfers_go_through_a_storm_of_signals(transport: str, signal_storm: None) -> None:
    with TransferEngine() as target:
        region = target.allocate(1 << 20, export=True)
        assert region.array is not None
        region.array[:] = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8)
        for _ in range(60):
            with TransferEngine(transport=transport) as reader:
                peer = reader.open_peer(target.name)
                local = reader.allocate(1 << 20)
                assert local.array is not None
                reader.read(local.addr, peer, region.id, 0, 1 << 20)
                assert np.array_equal(local.array, region.array)
