"""The shard map a sharded cluster's masters write in etcd (kvstore.rpc.etcd_records.Records.encode_shards)
is signed like a leader record: a count verifies only with the cluster's secret and name, so who may
write etcd but lacks the secret cannot make clients route keys to other masters."""

from __future__ import annotations

import json

import pytest

from kvstore.rpc.etcd_records import Records


def test_a_signed_map_verifies_only_with_its_secret_and_cluster() -> None:
    mine = Records(b"s" * 32, "c")
    value = mine.encode_shards(4)
    assert mine.decode_shards(value) == 4
    assert Records(b"t" * 32, "c").decode_shards(value) is None  # another secret
    assert Records(b"s" * 32, "d").decode_shards(value) is None  # another cluster's map copied here
    forged = json.loads(value)
    forged["shards"] = 2  # the count changed, the MAC kept
    assert mine.decode_shards(json.dumps(forged).encode()) is None
    assert mine.decode_shards(b'{"shards":4}') is None  # unsigned


@pytest.mark.parametrize(
    "value", [None, b"", b"4", b"not json", b'{"shards":0}', b'{"shards":257}', b'{"shards":"4"}', b"[4]"]
)
def test_a_malformed_map_is_none(value: bytes | None) -> None:
    assert Records(b"", "c").decode_shards(value) is None


def test_without_a_secret_a_well_formed_count_is_taken() -> None:
    open_cluster = Records(b"", "c")
    assert open_cluster.encode_shards(3) == b'{"shards":3}'
    assert open_cluster.decode_shards(b'{"shards":3}') == 3
