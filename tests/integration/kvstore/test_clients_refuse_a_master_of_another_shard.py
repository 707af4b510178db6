"""A client or node whose master setting routes keys differently from how the masters split the key space
is refused at its first hello, naming both views: each sharded master says in Hello's reply which shard
of how many it serves (kvstore.rpc.session_requests.hello_reply), and the client compares it with the
shard its own list sends there (kvstore.cluster.master_client). Without the check each of these stored
keys on a master other clients never ask, and one key read back two values (review finding 1)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from kvstore import Store
from kvstore.cluster.shards import shard_of
from kvstore.errors import InvalidArgumentError
from kvstore.procs import kvstore_process
from tests.integration.kvstore.conftest import start_shard_masters


@pytest.fixture(scope="module")
def two_shard_masters() -> Iterator[list[str]]:
    """Two master processes, shard 0 and shard 1 of 2 (no etcd: a static list)."""
    with ExitStack() as stack:
        yield start_shard_masters(stack)


@pytest.fixture(scope="module")
def plain_masters() -> Iterator[list[str]]:
    """Two masters started without --shard/--shards: each a whole cluster (as before sharding)."""
    with ExitStack() as stack:
        masters = [
            stack.enter_context(kvstore_process(["master", "--port", "0"]))[1].split()[0] for _ in range(2)
        ]
        yield masters


def refused(master: str) -> str:
    with pytest.raises(InvalidArgumentError) as caught:
        Store.connect(master, rpc_timeout=5.0).close()
    return str(caught.value)


def test_a_comma_list_where_a_semicolon_was_meant_is_refused(two_shard_masters: list[str]) -> None:
    why = refused(",".join(two_shard_masters))
    assert f"master {two_shard_masters[0]} serves shard 0 of 2" in why
    assert "routes shard 0 of 1 to it" in why


def test_the_shards_listed_in_another_order_are_refused(two_shard_masters: list[str]) -> None:
    why = refused(";".join(reversed(two_shard_masters)))
    assert "serves shard 1 of 2, but this client's master setting routes shard 0 of 2" in why


def test_a_one_shard_client_of_a_sharded_cluster_is_refused(two_shard_masters: list[str]) -> None:
    for shard, master in enumerate(two_shard_masters):
        assert f"serves shard {shard} of 2, but this client's master setting routes shard 0 of 1" in refused(
            master
        )


def test_a_sharded_client_of_masters_started_without_shards_is_refused(plain_masters: list[str]) -> None:
    # (what a master of a release before sharding says too: its Hello reply names no shard)
    why = refused(";".join(plain_masters))
    assert f"master {plain_masters[0]} serves shard 0 of 1" in why and "routes shard 0 of 2" in why


def test_a_node_with_a_comma_list_is_refused_and_exits(two_shard_masters: list[str]) -> None:
    master = ",".join(two_shard_masters)
    run = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "node", "--master", master, "--segment-size", "16MiB"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "serves shard 0 of 2" in run.stderr and "routes shard 0 of 1" in run.stderr


def test_the_right_list_still_works_and_each_key_lands_on_its_shard(two_shard_masters: list[str]) -> None:
    keys = [f"agree/{i}" for i in range(16)]
    assert {shard_of(k, 2) for k in keys} == {0, 1}
    with Store.connect(";".join(two_shard_masters), rpc_timeout=5.0) as store:
        assert store.shards == 2  # type: ignore[attr-defined]
        assert [s.session.master.shard for s in store.stores] == [(0, 2), (1, 2)]  # type: ignore[attr-defined]
        assert store.batch_exists(keys) == [False] * len(keys)
