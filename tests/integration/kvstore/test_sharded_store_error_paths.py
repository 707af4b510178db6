"""A sharded client and node on their error paths, with real processes (two master processes, a node
process that joins both, clients here): a batch whose part for one shard fails never returns while
another shard's part still writes into the caller's buffers; a group whose name has the member form is
stored where its members are looked up; a node whose second shard answers late is not forgotten by the
first meanwhile."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import numpy as np
import pytest

from kvstore import Store
from kvstore.blocks import group_keys
from kvstore.client.sharded import ShardedStore
from kvstore.cluster.shards import shard_of
from kvstore.errors import InvalidArgumentError, NotSupportedError
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import wait_for_mounts
from transfer_engine.procs import READY_PREFIX

MiB = 1 << 20


def _masters(stack: ExitStack, *extra: str) -> list[str]:
    masters = []
    for shard in range(2):
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--shard", str(shard), "--shards", "2", *extra])
        )
        masters.append(ready.split()[0])
    return masters


@pytest.fixture
def cluster() -> Iterator[str]:
    """Two shards' masters and a node of 256 MiB (128 on each): the client's master setting."""
    with ExitStack() as stack:
        address = ";".join(_masters(stack))
        stack.enter_context(kvstore_process(["node", "--master", address, "--segment-size", str(256 * MiB)]))
        yield address


def _joined(address: str) -> ShardedStore:
    store = Store.connect(address)
    assert isinstance(store, ShardedStore)
    for part in store.stores:
        wait_for_mounts(part, 1)
    return store


def test_a_failed_part_returns_only_once_every_shard_stopped_writing(cluster: str) -> None:
    """Shard 0's part raises at once (a read-only buffer: the caller's mistake), shard 1's reads 48 MiB:
    after the raise nothing more lands in the caller's buffers (before: shard 1's part went on writing
    after the call had raised)."""
    keys = [f"error-path/{i}" for i in range(200)]
    ones = [k for k in keys if shard_of(k, 2) == 1][:48]
    zero = next(k for k in keys if shard_of(k, 2) == 0)
    with _joined(cluster) as store:
        assert store.batch_put_from(ones, [bytes([1 + i]) * MiB for i in range(len(ones))]) == [0] * 48
        store.put(zero, b"z" * 4096)
        out = np.zeros((len(ones), MiB), dtype=np.uint8)
        store.register_buffer(out)
        for _ in range(3):
            with pytest.raises(InvalidArgumentError):
                store.batch_get_into([zero, *ones], [bytes(4096), *out])  # bytes: not writable
            out.fill(0)  # the caller takes its buffers back once the call failed
            time.sleep(0.5)
            assert not out.any(), "a shard's part wrote into the caller's buffers after the call raised"
        # the same batch with a writable buffer reads every value
        first = np.zeros(4096, dtype=np.uint8)
        assert store.batch_get_into([zero, *ones], [first, *out]) == [4096] + [MiB] * 48
        assert all(int(out[i, 0]) == 1 + i and int(out[i, -1]) == 1 + i for i in range(48))


def test_pieces_that_do_not_add_up_and_one_store_calls_are_refused(cluster: str) -> None:
    keys = [f"pieces/{i}" for i in range(8)]
    with _joined(cluster) as store:
        with pytest.raises(InvalidArgumentError, match="add up"):
            store.batch_put_from_pieces(keys, [1, 2, 3], [8, 8, 8], [1] * 8)
        with pytest.raises(InvalidArgumentError, match="8 keys but 3 values"):
            store.batch_put_from_pieces(keys, [1, 2, 3], [8, 8, 8], [1, 1, 1])
        assert store.batch_exists(keys) == [False] * 8
        # what one Store has and several shards lack, refused by name (mooncake get_hostname reads .engine)
        with pytest.raises(NotSupportedError, match="engine per shard"):
            _ = store.engine
        assert store.match_prefix(keys).matched == 0  # (spans shards: test_sharded_match_prefix_spans_shards)


def test_a_group_named_like_a_member_is_stored_where_its_members_are_looked_up(cluster: str) -> None:
    """put_group routes as each member is routed (by the whole group name), not by the name's own
    routing: "ns/block3#0of2" routes by "ns/block3" as a key, its members by "ns/block3#0of2"."""
    group = next(
        g
        for g in (f"nested/block{n}#0of2" for n in range(100))
        if shard_of(g, 2) != shard_of(group_keys(g, 3)[0], 2)
    )
    values = [bytes([7 + i]) * (1000 + i) for i in range(3)]
    with _joined(cluster) as store:
        assert store.put_group(group, values) == [0, 0, 0]
        assert store.batch_get(group_keys(group, 3)) == values  # (before: three misses)
        assert store.batch_exists(group_keys(group, 3)) == [True] * 3


class _LateProxy:
    """A TCP relay on 127.0.0.1 to `upstream` that holds back every reply until `delay` seconds after it
    started: a master that answers late, for whoever joins it first."""

    def __init__(self, upstream: str, delay: float) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.release_at = time.monotonic() + delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, late: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if late:
                    time.sleep(max(0.0, self.release_at - time.monotonic()))
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                s.close()

    def close(self) -> None:
        self.listener.close()


def test_a_node_heartbeats_each_shard_from_its_join_on() -> None:
    """Masters that forget a client after 2 s without a heartbeat; the node's second shard answers 5 s
    late (a relay that holds its replies): shard 0, joined first, never forgets the node (before: no
    heartbeat until every shard had joined, so shard 0 dropped it and it registered again)."""
    with ExitStack() as stack:
        masters = _masters(stack, "--client-ttl", "2", "--heartbeat-interval", "0.3")
        proxy = _LateProxy(masters[1], delay=5.0)
        stack.callback(proxy.close)
        command = ["node", "--master", f"{masters[0]};{proxy.address}", "--segment-size", str(32 * MiB)]
        node = subprocess.Popen(
            [sys.executable, "-m", "kvstore.cli", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        stack.callback(node.kill)
        assert node.stdout is not None and node.stderr is not None
        ready = node.stdout.readline()
        assert ready.startswith(READY_PREFIX), node.stderr.read()
        time.sleep(2.0)  # heartbeats a while with both shards joined
        node.kill()
        node.wait()
        said = node.stderr.read()
    assert "forgot this client" not in said, said
    assert "registering again" not in said, said
