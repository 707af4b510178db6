"""get_blocks(deadline=...) against a real cluster of two nodes, one of them slowed (SIGSTOP; a netem delay
in a network namespace): the call returns within the deadline + 10 ms (the issue's bound, the median of
several tries on this shared machine) with the blocks of the healthy node before the first block on the
slow one, those bytes correct, and a canary proves that nothing lands in the buffers of the missed blocks
once the call has returned, even after the slow node sends its late replies; the client then reads all.
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np
import pytest

from kvstore import Store
from kvstore.procs import kvstore_process
from tests.conftest import freeze
from tests.integration.conftest import Namespace

BLOCK = 64 << 10
KEYS = 48
HEALTHY_FIRST = 8  # blocks of the healthy node before the first block of the slow one
DEADLINE = 0.050
BOUND = DEADLINE + 0.010
TRIES = 5
CANARY = 0xA5
LATE_REPLIES_SECONDS = 0.5  # time the resumed node is given to send what it owed
# A block's 64 KiB take ~130 ms on the slow link, so the deadline falls in the middle of a payload: netem
# where the kernel has it, else a token bucket of the same rate (this machine's kernel has no sch_netem).
SLOW_LINK = (
    ["netem", "delay", "20ms", "rate", "4mbit"],
    ["tbf", "rate", "4mbit", "burst", "16kb", "latency", "2s"],
)
SLOW_LINK_DRAIN_SECONDS = 1.5  # the 4 slow blocks' replies all arrive by then


@dataclass
class Layout:
    keys: list[str]  # in prefix order: HEALTHY_FIRST on the healthy node, then slow ones, then healthy ones
    values: dict[str, np.ndarray]


def block_value(i: int) -> np.ndarray:
    return ((np.arange(BLOCK, dtype=np.uint32) * 2654435761 + i) >> 7).astype(np.uint8)


def put_spread(store: Store, slow_engine: str) -> Layout:
    """Puts KEYS blocks (the master spreads them over both nodes) and orders them into a prefix whose
    first block on the slow node comes after HEALTHY_FIRST blocks on the healthy one."""
    names = [f"deadline/0x{i:016x}" for i in range(KEYS)]
    values = {name: block_value(i) for i, name in enumerate(names)}
    assert store.batch_put_from(names, [values[n] for n in names], replicas=1) == [0] * KEYS
    where = {name: found.locations[0].engine for name, found in zip(names, store.locate(names), strict=True)}
    slow = [n for n in names if where[n] == slow_engine]
    healthy = [n for n in names if where[n] != slow_engine]
    assert len(slow) >= 4 and len(healthy) >= 2 * HEALTHY_FIRST, "the master put every block on one node"
    keys = healthy[:HEALTHY_FIRST] + slow[:4] + healthy[HEALTHY_FIRST : 2 * HEALTHY_FIRST]
    return Layout(keys, values)


def timed_tries(
    store: Store,
    layout: Layout,
    slow_down: Callable[[], None],
    resume: Callable[[], None],
    late_seconds: float = LATE_REPLIES_SECONDS,
    nothing_arrives: bool = True,
) -> None:
    """TRIES deadline loads with the slow node slowed; asserts the prefix, the bytes, the canary and that
    the client reads everything afterwards; the median time within BOUND. The canary: nothing changes in
    the caller's memory once the call returned; with `nothing_arrives` (a stopped node), the slow node's
    blocks hold exactly the canary (else what landed before the fence stays, and the result says miss)."""
    n = len(layout.keys)
    memory = np.zeros(n * BLOCK, np.uint8)
    store.register_buffer(memory)  # the bytes land straight in the caller's memory: the strict case
    buffers = [memory[i * BLOCK : (i + 1) * BLOCK] for i in range(n)]
    assert store.get_blocks(layout.keys, buffers) == n  # every peer opened, its connections up
    took = []
    for _ in range(TRIES):
        store.leases.clear()  # (each try asks the master, as a fresh load would)
        memory[:] = CANARY
        slow_down()
        try:
            started = time.monotonic()
            loaded = store.get_blocks(layout.keys, buffers, deadline=DEADLINE)
            took.append(time.monotonic() - started)
            assert loaded == HEALTHY_FIRST
            returned = memory.copy()
        finally:
            resume()
        time.sleep(late_seconds)
        assert np.array_equal(memory, returned), "bytes landed in the caller's buffers after the call"
        for key, buffer in zip(layout.keys[:loaded], buffers, strict=False):
            assert np.array_equal(buffer, layout.values[key])
        slow = memory[HEALTHY_FIRST * BLOCK : (HEALTHY_FIRST + 4) * BLOCK]
        assert not nothing_arrives or (slow == CANARY).all()  # the missed blocks: exactly the canary
        assert store.get_blocks(layout.keys, buffers) == n  # the connections are in step and usable
        for key, buffer in zip(layout.keys, buffers, strict=True):
            assert np.array_equal(buffer, layout.values[key])
    print(
        f"get_blocks(deadline={DEADLINE * 1000:.0f} ms): "
        + ", ".join(f"{t * 1000:.1f}" for t in took)
        + " ms"
    )
    assert statistics.median(took) <= BOUND, (
        f"median {statistics.median(took) * 1000:.1f} ms > {BOUND * 1000} ms"
    )
    assert store.stats_local.checksum_mismatches == 0


@contextmanager
def two_nodes() -> Iterator[tuple[str, list[tuple[object, str]]]]:
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(["master", "--port", "0", "--client-ttl", "60"]))
        address = ready.split()[0]
        nodes = []
        for _ in range(2):
            proc, info = stack.enter_context(
                kvstore_process(["node", "--master", address, "--segment-size", "32MiB"])
            )
            nodes.append((proc, info.split()[0]))
        yield address, nodes


def test_a_stopped_node_costs_the_deadline_and_writes_nothing_late() -> None:
    """SIGSTOP: the node's kernel takes the read requests, the node answers nothing until SIGCONT; then
    it sends every reply it owes, which the client must drain, not land."""
    with two_nodes() as (address, nodes), Store.connect(address, transport="tcp") as store:
        (stopped, stopped_engine), _healthy = nodes
        layout = put_spread(store, stopped_engine)
        pid = stopped.pid  # type: ignore[attr-defined]

        def resume() -> None:
            stopped.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]

        try:
            timed_tries(store, layout, lambda: freeze(pid), resume)
        finally:
            resume()


@pytest.mark.root
def test_a_node_behind_a_slow_link_costs_the_deadline_and_writes_nothing_late(netns: Namespace) -> None:
    """The slow node in its own network namespace, what it sends slowed by tc (SLOW_LINK): the first slow
    block's reply starts before the deadline and ends after it, so the fence falls in the middle of a
    payload; the client must stop landing it there and drain the rest, with no wait for the rest of the
    payload (the copy guard used to be held while the payload was waited for).
    Needs root (skipped otherwise, with the reason)."""
    ns_side = f"kvn{netns.name.removeprefix('kvs')}"
    with ExitStack() as stack:
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--host", netns.local_addr, "--client-ttl", "60"])
        )
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "32MiB"]
        stack.enter_context(kvstore_process([*node, "--host", netns.local_addr]))
        _, slow = stack.enter_context(
            kvstore_process([*node, "--host", netns.peer_addr], prefix=["ip", "netns", "exec", netns.name])
        )
        store = stack.enter_context(Store.connect(address, host=netns.local_addr, transport="tcp"))
        layout = put_spread(store, slow.split()[0])

        def slow_link() -> None:
            failed = []
            for qdisc in SLOW_LINK:
                shape = ["tc", "-n", netns.name, "qdisc", "replace", "dev", ns_side, "root", *qdisc]
                done = subprocess.run(shape, capture_output=True, text=True, timeout=10)
                if done.returncode == 0:
                    return
                failed.append(f"{qdisc[0]}: {done.stderr.strip()}")
            pytest.skip(f"no qdisc to slow a link with here ({'; '.join(failed)})")

        try:  # (the link stays slow between tries: deleting the qdisc would drop the replies it holds)
            timed_tries(store, layout, slow_link, lambda: None, SLOW_LINK_DRAIN_SECONDS, False)
        finally:
            subprocess.run(
                ["tc", "-n", netns.name, "qdisc", "del", "dev", ns_side, "root"], capture_output=True
            )


def test_a_connectors_load_budget_ends_a_load_stalled_on_a_stopped_node() -> None:
    """BlockMover (every engine connector's loads) under load_deadline_ms=50: the blocks of the stopped node
    are load errors (the engine recomputes them), the others load, and the batch takes about the budget
    (without it: the transfer timeout, seconds)."""
    from kvstore.integrations.paged import Batch, BlockMover, StoreLink

    with (
        two_nodes() as (address, nodes),
        Store.connect(address, transport="tcp", load_deadline_ms=50) as store,
    ):
        (stopped, stopped_engine), _healthy = nodes
        layout = put_spread(store, stopped_engine)
        memory = np.full(len(layout.keys) * BLOCK, CANARY, np.uint8)
        store.register_buffer((memory.ctypes.data, memory.nbytes))
        batch = Batch()
        for i, key in enumerate(layout.keys):
            batch.add(key, [(memory.ctypes.data + i * BLOCK, BLOCK)])
        mover = BlockMover(StoreLink.wrapping(store))
        assert mover.load(batch).result() == [True] * len(layout.keys)  # (peers opened)
        memory[:] = CANARY
        freeze(stopped.pid)  # type: ignore[attr-defined]
        try:
            started = time.monotonic()
            loaded = mover.load(batch).result()
            took = time.monotonic() - started
        finally:
            stopped.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
        slow = set(range(HEALTHY_FIRST, HEALTHY_FIRST + 4))
        assert loaded == [i not in slow for i in range(len(layout.keys))]
        assert took < 0.5, f"a 50 ms load budget took {took * 1000:.0f} ms"
        time.sleep(LATE_REPLIES_SECONDS)
        for i, key in enumerate(layout.keys):
            block = memory[i * BLOCK : (i + 1) * BLOCK]
            assert (block == CANARY).all() if i in slow else np.array_equal(block, layout.values[key])
        mover.close()


def test_a_first_contact_with_a_stopped_node_costs_the_deadline_not_a_handshake_timeout() -> None:
    """A reader that never opened the stopped node: its handshake (up to handshake_timeout, 5 s) is waited
    for at most half the deadline, the healthy prefix loads, and once the node is back the handshake that
    went on in the background serves the next read."""
    with two_nodes() as (address, nodes), Store.connect(address, transport="tcp") as writer:
        (stopped, stopped_engine), _healthy = nodes
        layout = put_spread(writer, stopped_engine)
        memory = np.full(len(layout.keys) * BLOCK, CANARY, np.uint8)
        buffers = [memory[i * BLOCK : (i + 1) * BLOCK] for i in range(len(layout.keys))]
        freeze(stopped.pid)  # type: ignore[attr-defined]
        try:
            with Store.connect(address, transport="tcp") as reader:
                reader.register_buffer(memory)
                started = time.monotonic()
                loaded = reader.get_blocks(layout.keys, buffers, deadline=DEADLINE)
                took = time.monotonic() - started
                returned = memory.copy()
                stopped.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
                time.sleep(LATE_REPLIES_SECONDS)
                print(f"first contact, get_blocks(deadline={DEADLINE * 1000:.0f} ms): {took * 1000:.1f} ms")
                assert loaded == HEALTHY_FIRST and took < 0.2
                assert np.array_equal(memory, returned)
                assert (memory[HEALTHY_FIRST * BLOCK : (HEALTHY_FIRST + 4) * BLOCK] == CANARY).all()
                assert reader.get_blocks(layout.keys, buffers, deadline=5.0) == len(layout.keys)
                for key, buffer in zip(layout.keys, buffers, strict=True):
                    assert np.array_equal(buffer, layout.values[key])
        finally:
            stopped.send_signal(signal.SIGCONT)  # type: ignore[attr-defined]
