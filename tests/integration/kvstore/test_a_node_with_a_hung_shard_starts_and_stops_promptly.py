"""A node of a cluster split over two shards whose second shard's 'master' accepts connections but never
answers (a hung or stopped process: the kernel still completes the connect) starts serving the shard
that answers within seconds, and a clean stop (SIGTERM) ends it at once, while it keeps retrying the hung
shard. The node's RPC timeout is 30 s here: a try that waited for it held the readiness for 30 s (before:
ready after the whole RPC timeout, and the stop waited for the retry's hello to time out)."""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from kvstore.procs import kvstore_process

RPC_TIMEOUT = 30.0
READY_WITHIN = 12.0  # (a 2 s hello and the node's start, with room for a loaded machine)
STOPPED_WITHIN = 8.0  # (the retry thread is in a hello that would end only with the RPC timeout)


@pytest.fixture
def hung_master() -> Iterator[str]:
    """The address of a socket that listens and is never accepted from: a connect succeeds, nothing is
    ever answered."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        yield f"127.0.0.1:{hole.getsockname()[1]}"


def test_a_hung_shard_neither_holds_the_start_nor_the_stop(
    hung_master: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSTORE_RPC_TIMEOUT", str(RPC_TIMEOUT))
    with ExitStack() as stack:
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--shard", "0", "--shards", "2"])
        )
        started = time.monotonic()
        node, line = stack.enter_context(
            kvstore_process(
                ["node", "--master", f"{ready.split()[0]};{hung_master}", "--segment-size", "64MiB"]
            )
        )
        ready_after = time.monotonic() - started
        engines = line.split()[0].split(",")
        assert engines[0] != "-" and engines[1] == "-", line  # shard 0 served, shard 1 not joined
        assert ready_after < READY_WITHIN, f"ready only after {ready_after:.1f} s"

        # the retry thread tries again 0.5 s after the start, a hello that the hung shard never answers:
        # the stop comes while it is under way
        time.sleep(1.5)
        asked = time.monotonic()
        node.send_signal(signal.SIGTERM)
        code = node.wait(timeout=RPC_TIMEOUT * 2)
        stopped_after = time.monotonic() - asked
        assert code == 0
        assert stopped_after < STOPPED_WITHIN, f"stopped only {stopped_after:.1f} s after SIGTERM"
        print(f"ready after {ready_after:.2f} s, stopped {stopped_after:.2f} s after SIGTERM")
