"""`kvstore index` as a process: engines' KV events in over ZMQ (caught up by replay when registered late,
gaps filled by replay), Conductor's HTTP API out; bad batches and bad requests refused with the index
still serving."""

from __future__ import annotations

import http.client
import json
import os
import stat
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from kvstore.index.hashing import seq_hashes
from kvstore.procs import kvstore_process
from tests.helpers.kv_event_publisher import Publisher, block_stored
from tests.helpers.store_credit import eventually

BLOCK = 4
MODEL = "llama"


@pytest.fixture
def index() -> Iterator[str]:
    with kvstore_process(["index", "--port", "0"]) as (_, ready):
        yield ready.removeprefix("http://")


def call(address: str, path: str, body: object = None, raw: bytes | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(address, timeout=10)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        conn.request(
            "POST" if body is not None or raw is not None else "GET",
            path,
            body=data if (body is not None or raw is not None) else None,
        )
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def register(address: str, pub: Publisher, instance: str, rank: int = 0) -> None:
    status, reply = call(address, "/register", {
        "endpoint": pub.endpoint, "replay_endpoint": pub.replay_endpoint, "type": "vLLM",
        "modelname": MODEL, "instance_id": instance, "block_size": BLOCK, "dp_rank": rank,
    })  # fmt: skip
    assert (status, reply) == (200, {"status": "registered successfully", "instance_id": instance})


def query(address: str, tokens: list[int]) -> dict:
    status, reply = call(address, "/query", {"model": MODEL, "token_ids": tokens, "block_size": BLOCK})
    assert status == 200, reply
    return reply["default"]


def test_events_before_and_after_registering_and_a_gap_are_all_indexed(index: str) -> None:
    tokens = list(range(100, 100 + 6 * BLOCK))
    pub = Publisher()
    try:
        pub.publish([block_stored([b"a" * 32, b"b" * 32], tokens[: 2 * BLOCK], BLOCK)])  # before registering
        register(index, pub, "node-1")
        time.sleep(0.3)  # (a SUB socket joins a moment after connecting)
        pub.publish(
            [block_stored([b"c" * 32], tokens[2 * BLOCK : 3 * BLOCK], BLOCK, parent=b"b" * 32)], send=False
        )
        pub.publish([block_stored([b"d" * 32], tokens[3 * BLOCK : 4 * BLOCK], BLOCK, parent=b"c" * 32)])

        def four_blocks() -> None:
            row = query(index, tokens)["node-1"]
            assert row == {"longest_matched": 4 * BLOCK, "GPU": 4 * BLOCK, "CPU": 0, "DISK": 0,
                           "DP": {"0": 4 * BLOCK}}  # fmt: skip

        eventually(four_blocks)
        # By hash: the contract's rolling hash of the same tokens.
        hashes = seq_hashes(tokens, BLOCK)
        status, reply = call(
            index, "/query_by_hash", {"model": MODEL, "seq_hashes": hashes, "block_size": BLOCK}
        )
        assert status == 200 and reply["default"]["node-1"]["longest_matched"] == 4 * BLOCK
        # A removal in the middle cuts the run there.
        pub.publish([{"type": "BlockRemoved", "block_hashes": [b"c" * 32], "medium": "GPU"}])
        eventually(lambda: _assert(query(index, tokens)["node-1"]["longest_matched"] == 2 * BLOCK))
        # A bad batch is counted; the stream goes on.
        pub.publish([], raw=b"\xc1 not msgpack")
        pub.publish([{"type": "AllBlocksCleared"}])
        eventually(lambda: _assert(query(index, tokens)["node-1"]["longest_matched"] == 0))
        status, s = call(index, "/status")
        publisher = s["publishers"][0]
        assert publisher["bad_batches"] == 1 and publisher["missed_batches"] == 0
    finally:
        pub.close()


def test_instances_are_listed_per_scope_and_unregistering_forgets_them(index: str) -> None:
    tokens = list(range(2 * BLOCK))
    a, b = Publisher(), Publisher()
    try:
        register(index, a, "a")
        register(index, b, "b", rank=1)
        time.sleep(0.3)
        a.publish([block_stored([1, 2], tokens, BLOCK)])
        b.publish([block_stored([7], tokens[:BLOCK], BLOCK, medium="CPU")], rank=1)
        eventually(lambda: _assert(query(index, tokens) == {
            "a": {"longest_matched": 8, "GPU": 8, "CPU": 0, "DISK": 0, "DP": {"0": 8}},
            "b": {"longest_matched": 4, "GPU": 0, "CPU": 4, "DISK": 0, "DP": {"1": 4}},
        }))  # fmt: skip
        status, reply = call(index, "/query", {"model": "other", "token_ids": tokens, "block_size": BLOCK})
        assert (status, reply) == (200, {"default": {}})
        one = {"model": MODEL, "token_ids": tokens, "block_size": BLOCK, "instance_id": "b"}
        assert list(call(index, "/query", one)[1]["default"]) == ["b"]
        status, reply = call(index, "/unregister", {"instance_id": "a", "dp_rank": 0, "type": "vLLM"})
        assert reply == {"status": "unregistered successfully", "removed_instances": ["a|default|0"]}
        assert list(query(index, tokens)) == ["b"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    "path, body",
    [
        ("/query", {"model": MODEL, "block_size": BLOCK}),
        ("/query", {"model": MODEL, "block_size": 0, "token_ids": []}),
        ("/query", {"model": MODEL, "block_size": BLOCK, "token_ids": [-1]}),
        ("/query", {"model": MODEL, "block_size": BLOCK, "token_ids": "abc"}),
        ("/query", [1, 2]),
        ("/query_by_hash", {"model": MODEL, "block_size": BLOCK, "seq_hashes": [2**64]}),
        ("/register", {"endpoint": "tcp://127.0.0.1:1", "type": "vLLM", "modelname": MODEL}),
        (
            "/register",
            {
                "endpoint": "http://x",
                "type": "vLLM",
                "modelname": MODEL,
                "instance_id": "i",
                "block_size": 4,
                "dp_rank": 0,
            },
        ),
        (
            "/register",
            {
                "endpoint": "tcp://*:5557",
                "type": "vLLM",
                "modelname": MODEL,
                "instance_id": "i",
                "block_size": 4,
                "dp_rank": 0,
            },
        ),
        ("/unregister", {"instance_id": "i"}),
    ],
)
def test_bad_requests_get_400_and_the_index_goes_on(index: str, path: str, body: object) -> None:
    status, reply = call(index, path, body)
    assert status == 400 and reply["error"]
    assert call(index, "/health")[0] == 200


def test_bodies_that_are_not_json_or_too_big_are_refused(index: str) -> None:
    assert call(index, "/query", raw=b"{not json")[0] == 400
    conn = http.client.HTTPConnection(index, timeout=10)
    conn.putrequest("POST", "/query")
    conn.putheader("Content-Length", str(1 << 30))
    conn.endheaders()
    assert conn.getresponse().status == 400
    conn.close()
    assert call(index, "/nowhere", {})[0] == 404 and call(index, "/health")[0] == 200


def _assert(ok: bool) -> None:
    assert ok


def test_the_masters_store_events_feed_the_index(index: str, tmp_path) -> None:
    """A master publishing its store's KV events: objects keyed by sequence hashes show up in the index
    as the store's blocks (medium CPU) when put, and go when removed; other keys are carried by name only."""
    from kvstore import Store

    endpoint = f"ipc://{tmp_path}/store-events"
    with ExitStack() as stack:
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--kv-events-endpoint", endpoint])
        )
        master = ready.split()[0]
        assert stat.S_IMODE(os.stat(endpoint.removeprefix("ipc://")).st_mode) == 0o600  # its user's only
        stack.enter_context(kvstore_process(["node", "--master", master, "--segment-size", "64MiB"]))
        status, reply = call(index, "/register", {
            "endpoint": endpoint, "type": "kvstore", "modelname": MODEL, "instance_id": "store",
            "block_size": BLOCK, "dp_rank": 0,
        })  # fmt: skip
        assert status == 200, reply
        time.sleep(0.3)
        hashes = seq_hashes(list(range(3 * BLOCK)), BLOCK)
        keys = [str(hashes[0]), hex(hashes[1]), "not-a-hash"]
        store = stack.enter_context(Store.connect(master))
        assert store.batch_put_from(keys, [b"x" * 100] * 3) == [0, 0, 0]
        by_hash = {"model": MODEL, "seq_hashes": hashes, "block_size": BLOCK}

        def two_blocks() -> None:
            row = call(index, "/query_by_hash", by_hash)[1]["default"]["store"]
            assert row["longest_matched"] == row["CPU"] == 2 * BLOCK and row["GPU"] == 0, row

        eventually(two_blocks)
        store.remove(keys[1])
        eventually(
            lambda: _assert(call(index, "/query_by_hash", by_hash)[1]["default"]["store"]["CPU"] == BLOCK)
        )
        publisher = call(index, "/status")[1]["publishers"][0]
        assert publisher["bad_batches"] == 0 and publisher["missed_batches"] == 0


def test_a_master_refuses_to_publish_beyond_loopback_without_insecure() -> None:
    """And on tcp at all unless told (issue 39, item 11: any local user could subscribe to a loopback
    port and learn every key, even with a cluster secret)."""
    from kvstore.errors import PermissionDeniedError
    from kvstore.master.wire.kv_events import check_endpoint, seq_hash

    with pytest.raises(PermissionDeniedError):
        check_endpoint("tcp://0.0.0.0:5600", insecure=False, tcp=True)
    with pytest.raises(PermissionDeniedError, match="kv-events-tcp"):
        check_endpoint("tcp://127.0.0.1:5600", insecure=False)
    with pytest.raises(PermissionDeniedError, match="kv-events-tcp"):
        check_endpoint("tcp://10.0.0.1:5600", insecure=True)
    check_endpoint("tcp://127.0.0.1:5600", insecure=False, tcp=True)
    check_endpoint("tcp://10.0.0.1:5600", insecure=True, tcp=True)
    check_endpoint("ipc:///tmp/x", insecure=False)
    assert [seq_hash(k) for k in ("12", "0x1F", "0x", "-1", "abc", str(2**64), "1e3")] == [
        12,
        31,
        None,
        None,
        None,
        None,
        None,
    ]
