"""Talking to a `kvstore index` that follows a master's KV events: its HTTP API, and the wait for its
subscription to the master to have joined (a PUB socket drops what it sends before a subscriber joins, and
a master keeps no replay)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from typing import Any

from kvstore import Store
from kvstore.blocks import member_key, seq_hashes, seq_key


def call(address: str, path: str, body: object = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(address, timeout=10)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request("GET" if body is None else "POST", path, body=data)
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        conn.close()


def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def query(index: str, model: str, block: int, tokens: list[int]) -> dict[str, Any]:
    """/query's rows (tenant "default")."""
    status, reply = call(index, "/query", {"model": model, "token_ids": tokens, "block_size": block})
    assert status == 200, reply
    return reply["default"]


def wait_subscribed(index: str, store: Store, model: str, block: int, namespace: str, instance: str) -> None:
    """Puts a probe block in `namespace` until the index credits it to `instance`, then removes it and
    waits until the credit is gone."""
    probe = list(range(900, 900 + block))
    key = member_key(seq_key(namespace, seq_hashes(probe, block)[0]), 0, 1)

    def credited(tokens: int) -> Callable[[], None]:
        def check() -> None:
            assert query(index, model, block, probe)[instance]["STORE"] == tokens

        return check

    deadline = time.monotonic() + 30
    while True:
        assert store.batch_put_from([key], [b"p" * 64]) == [0]
        try:
            eventually(credited(block), timeout=1.0)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            store.remove(key)
    store.remove(key)
    eventually(credited(0))
