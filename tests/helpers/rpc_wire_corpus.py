"""A fixed corpus of master request parameters, good and bad, and what the master's parse makes of each:
the parsed request's fields, or the error class and message. The outcomes in rpc_wire_golden.txt were
recorded from the hand-written parsers before requests were declared once (commit 79f2f78); the test
(tests/unit/kvstore/rpc/test_rpc_wire_unchanged.py) replays the corpus through today's parse.

Run as a script to record the outcomes again (only ever from a parse known to be right):
    python -m tests.helpers.rpc_wire_corpus > tests/helpers/rpc_wire_golden.txt
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import msgpack

from kvstore.errors import KVStoreError
from kvstore.rpc import messages as m
from kvstore.rpc import node_proof

TOKEN = "ab" * 16
CLIENT = m.client_id_for(TOKEN)
NODE_KEY = "0f" * 16
PUBLIC = node_proof.public_of(NODE_KEY)
NODE_ID = "host/n0#" + m.node_public_fingerprint(PUBLIC)
NONCE = "cd" * 16
PROOF = node_proof.sign(NODE_KEY, node_proof.message(NONCE, CLIENT, NODE_ID))
RECORD = [0, 1, 2, "k", 4096, 2**64 - 1, False, 3]
DISK_RECORD = [4096, "k", 10, 7, 3]

# Every method with parameters that pass (every field given), and the fields it may go without.
GOOD: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "hello": ({"version": m.PROTOCOL_VERSION}, ()),
    "register_client": (
        {
            "client_id": CLIENT,
            "host_id": "host",
            "node_id": NODE_ID,
            "token": TOKEN,
            "node_public": PUBLIC,
            "node_nonce": NONCE,
            "node_proof": PROOF,
        },
        ("node_id", "node_public", "node_nonce", "node_proof"),
    ),
    "heartbeat": (
        {"client_id": CLIENT, "touched": ["a", "b"], "paths": [["eth0", 1, 2, 3, 4, 5, 6]], "token": TOKEN},
        ("touched", "paths", "token"),
    ),
    "close_client": ({"client_id": CLIENT, "token": TOKEN}, ("token",)),
    "mount_segment": (
        {
            "client_id": CLIENT,
            "engine": "127.0.0.1:7000",
            "region_id": 3,
            "size": 1 << 20,
            "host_id": "host",
            "fence_slots": 64,
            "restoring": True,
            "token": TOKEN,
        },
        ("restoring", "token"),
    ),
    "restore_segment": (
        {
            "client_id": CLIENT,
            "segment_id": 2,
            "records": [RECORD, [*RECORD[:3], "é", *RECORD[4:]]],
            "last": True,
            "token": TOKEN,
            "removed": [["gone", 4]],
        },
        ("last", "token", "removed"),
    ),
    "unmount_segment": ({"client_id": CLIENT, "segment_id": 2, "token": TOKEN}, ("token",)),
    "await_work": (
        {
            "client_id": CLIENT,
            "wait": 1.5,
            "epoch": 3,
            "acked": [1, 2],
            "held_through": 9,
            "copied": [[1, True]],
            "disk_done": [[2, False]],
            "checked": [[3, True]],
            "token": TOKEN,
            "dropped_through": 4,
            "registration": 77,
        },
        (
            "epoch",
            "acked",
            "held_through",
            "copied",
            "disk_done",
            "checked",
            "token",
            "dropped_through",
            "registration",
        ),
    ),
    "mount_disk": (
        {
            "client_id": CLIENT,
            "size": 1 << 20,
            "host_id": "host",
            "path": "/tmp/disk",
            "engine": "127.0.0.1:7000",
            "file_region": 5,
            "restoring": False,
            "token": TOKEN,
        },
        ("engine", "file_region", "restoring", "token"),
    ),
    "restore_disk": (
        {
            "client_id": CLIENT,
            "records": [DISK_RECORD, DISK_RECORD[:4]],
            "last": False,
            "token": TOKEN,
            "removed": [["gone", 4]],
        },
        ("last", "token", "removed"),
    ),
    "disk_degraded": ({"client_id": CLIENT, "reason": "EIO", "token": TOKEN}, ("token",)),
    "put_start": (
        {
            "client_id": CLIENT,
            "items": [["a", 1, 0], ["b", 2, 2**64 - 1]],
            "replicas": 2,
            "pin": True,
            "min_replicas": 1,
            "token": TOKEN,
        },
        ("pin", "min_replicas", "token"),
    ),
    "put_end": ({"client_id": CLIENT, "keys": ["a", "b"], "token": TOKEN}, ("token",)),
    "put_revoke": ({"client_id": CLIENT, "keys": ["a"], "token": TOKEN}, ("token",)),
    "get_replicas": ({"keys": ["a", "é"], "prefix": True, "host_id": "host"}, ("prefix", "host_id")),
    "exists": ({"keys": ["a"]}, ()),
    "match_prefix": ({"keys": ["a", "b"]}, ()),
    "remove": (
        {"keys": ["a"], "force": True, "client_id": CLIENT, "token": TOKEN},
        ("force", "client_id", "token"),
    ),
    "remove_all": ({"force": True, "client_id": CLIENT, "token": TOKEN}, ("force", "client_id", "token")),
    "node_challenge": ({}, ()),
    "admin_challenge": ({"client_id": CLIENT, "token": TOKEN}, ("token",)),
    "admin_prove": ({"client_id": CLIENT, "proof": "ef" * 32, "token": TOKEN}, ("token",)),
    "stats": ({}, ()),
    "cluster_status": ({}, ()),
    "change_replica": ({"key": "a", "replicas": 0}, ()),
    "report_replicas": (
        {
            "client_id": CLIENT,
            "unreachable": ["127.0.0.1:7001"],
            "corrupt": [["a", "127.0.0.1:7000", 3, 4096, 9]],
            "token": TOKEN,
        },
        ("token",),
    ),
}

# Values each field is tried with (each one a peer can send): wrong types, bounds and either side of
# them, odd strings.
BAD: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    2**26 + 1,
    2**31 + 1,
    2**62 + 1,
    2**63,
    2**64 - 1,
    -(2**63),
    0.0,
    1.5,
    61.0,
    "",
    "x",
    "/",
    "/a\0b",
    "x" * 513,
    "é" * 300,
    "ab" * 16,
    "k" * 4097,
    b"raw",
    [],
    [None],
    [1, 2],
    ["k"],
    [[1, True]],
    {},
    {"a": 1},
)


def _element_variants(value: list[Any]) -> Iterator[Any]:
    """A list field's value with one of its entries (the first, then the last) spoiled in turn."""
    for where in {0, len(value) - 1}:
        entry = value[where]
        spoiled: list[Any] = []
        if isinstance(entry, list):
            for i in range(len(entry)):
                spoiled += [[*entry[:i], bad, *entry[i + 1 :]] for bad in BAD]
            spoiled += [entry[:-1], [*entry, 0], tuple(entry), "entry"]
        else:
            spoiled += list(BAD)
        for bad in spoiled:
            yield [*value[:where], bad, *value[where + 1 :]]


def cases() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (method, params) of the corpus, in a fixed order."""
    for method, (good, optional) in GOOD.items():
        yield method, dict(good)
        yield method, {k: v for k, v in good.items() if k not in optional}
        yield method, {**good, "surprise": 1}
        for name, value in good.items():
            yield method, {k: v for k, v in good.items() if k != name}
            for bad in BAD:
                yield method, {**good, name: bad}
            if isinstance(value, list) and value:
                for spoiled in _element_variants(value):
                    yield method, {**good, name: spoiled}
    yield "no_such_method", {}


def outcome(method: str, params: dict[str, Any]) -> list[Any]:
    """What parse makes of it: ["ok", the request's fields as msgpack sees them] or ["error", class, text]."""
    try:
        request = m.parse_request(method, params)
    except KeyError:
        return ["unknown"]
    except KVStoreError as exc:
        return ["error", type(exc).__name__, str(exc)]
    except Exception as exc:  # (a parse that fails outside the error hierarchy: recorded as it is)
        return ["crash", type(exc).__name__, str(exc)]
    fields = msgpack.unpackb(msgpack.packb(request.params(), use_bin_type=True), raw=False)
    return ["ok", type(request).__name__, fields]


PLACE = ["127.0.0.1:7000", 3, 4096, 7, 9]
LOCATION = [0, "host", "127.0.0.1:7000", 3, 4096, 7, 9, ""]
HOLD = [1, 3, 4096, 7, 9, "k", 10, 11, False, 2]
# Replies each method's decode_reply is given: the master's usual ones and spoiled ones.
REPLIES: dict[str, list[Any]] = {
    # A one-shard master's reply, a sharded master's (shard 1 of 2), and spoiled shard pairs
    "hello": [
        [11, 4],
        [11],
        "x",
        [11, 4, 1, 2],
        [11, 4, 0],
        [11, 4, 2, 2],
        [11, 4, 0, 257],
        [11, 4, True, 2],
    ],
    "register_client": [[1.0, 10.0, 5.0, 9, 123], [1.0, 10.0, 5.0, 9]],
    "heartbeat": [[True], [0], [], None],
    "restore_segment": [[1, 2], [], ["x"], {}],
    "await_work": [
        [0, [], [], [], [], [], []],
        [
            2,
            [[3, [1], [4], [5], [0]]],
            [HOLD],
            [[1, "k", 10, 11, PLACE, 2, 4096, 7, 9]],
            [[4096, "k", 3, 0]],
            [[1, "demote", "k", 10, 11, 8192, PLACE]],
            [[1, 3, 4096, 10, 11]],
        ],
        [0, [[3, [1], [4], [5], []]], [], [], [], [], []],
        [0, [], [HOLD[:-1]], [], [], [], []],
        # A hold with a user's target, one without (a master of the previous version sends none), one too long
        [0, [], [[*HOLD, 2], HOLD], [], [], [], []],
        [0, [], [[*HOLD, 2, 0]], [], [], [], []],
        [0, [], [], [], [[4096, "k", 3, -1]], [], []],
        [0, [], [], [], [], [], [[1, 3, 4096, 10, "x"]]],
        [0, [], [], [], [], []],
    ],
    "put_start": [[[0, "", [PLACE, PLACE]], [0, "", None], [5, "no room", None]], [[0, "", [PLACE[:4]]]], {}],
    "put_end": [[[0, "", None], [3, "missing", None]], [[0, ""]], None],
    "get_replicas": [
        [None, [10, 11, [LOCATION]], [10, 11, [[1, "host", "", 0, 8192, 0, 0, "/d/f"]]]],
        [[10, 11, [[1, "host", "", 0, 8191, 0, 0, "/d/f"]]]],
        [[10, 11, [[2, *LOCATION[1:]]]]],
        [[10, 11, [LOCATION[:7]]]],
        "x",
    ],
    "exists": [[True, 0, 1], "x"],
    "match_prefix": [[2, [["a"], ["b"]], {"a": 1}], [2, []]],
    "remove": [[[0, "", None]], [1]],
    "remove_all": [3],
    "node_challenge": ["ab" * 16, "ab", 5],
    "admin_challenge": ["ab" * 16, "ab" * 65],
    "stats": [{"a": 1}, []],
    "cluster_status": [{"nodes": []}, {"nodes": 1}],
}


def reply_cases() -> Iterator[tuple[str, Any]]:
    for method, replies in REPLIES.items():
        for reply in replies:
            yield method, reply


def reply_outcome(method: str, reply: Any) -> list[Any]:
    """What the request's decode_reply makes of a reply: ["ok", its repr] or ["error", class, text]."""
    try:
        decoded = m.REQUESTS[method].decode_reply(reply)
    except KVStoreError as exc:
        return ["error", type(exc).__name__, str(exc)]
    except Exception as exc:  # (recorded as it is)
        return ["crash", type(exc).__name__, str(exc)]
    return ["ok", repr(decoded)]


def corpus_digest() -> str:
    """A digest of the corpus's inputs: the golden file names it, so a changed corpus is seen."""
    h = hashlib.sha256()
    for method, params in cases():
        h.update(msgpack.packb([method, params], use_bin_type=True))
    for method, reply in reply_cases():
        h.update(msgpack.packb([method, reply], use_bin_type=True))
    return h.hexdigest()


def main() -> None:
    print(corpus_digest())
    for method, params in cases():
        print(repr(outcome(method, params)))
    for method, reply in reply_cases():
        print(repr(reply_outcome(method, reply)))


if __name__ == "__main__":
    main()
