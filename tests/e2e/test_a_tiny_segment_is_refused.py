"""A node's segment below 1 MiB is refused with the minimum in the message (a 64-byte one was accepted: its
192 KiB fence table and shared-memory pages cost far more than it holds), from the command line, the
environment and code alike; 1 MiB and more are taken."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvstore.config import NodeConfig
from kvstore.config.node import MIN_SEGMENT
from kvstore.errors import InvalidArgumentError


@pytest.mark.parametrize("size", [64, 4096, MIN_SEGMENT - 64])
def test_below_the_minimum_is_refused(size: int) -> None:
    with pytest.raises(InvalidArgumentError, match="segment_size must be at least 1MiB"):
        NodeConfig.load({}, segment_size=size)
    with pytest.raises(InvalidArgumentError, match="at least 1MiB"):
        NodeConfig.load({"KVSTORE_NODE_SEGMENT_SIZE": str(size)})


def test_the_minimum_is_taken() -> None:
    assert NodeConfig.load({}, segment_size=MIN_SEGMENT).segment_size == 1 << 20
    assert NodeConfig.load({"KVSTORE_NODE_SEGMENT_SIZE": "16MiB"}).segment_size == 16 << 20


def test_kvstore_node_refuses_a_64_byte_segment_in_one_line() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "node", "--master", "127.0.0.1:1", "--segment-size", "64"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )
    assert run.returncode == 1
    assert run.stderr.strip() == (
        "kvstore: error: a node's segment_size must be at least 1MiB, not 64B: smaller, its fence table "
        "(192 KiB) and pages cost more than it holds"
    )
