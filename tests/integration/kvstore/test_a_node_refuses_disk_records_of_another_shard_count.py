"""A node's disk tier is read back only by a node of the same shard count: a node of two shards keeps
'<disk>.shard-<i>' and never reads '<disk>' itself, a node of one shard the reverse. Started on the other
layout's records it now refuses to start, saying what to do, and leaves them as they were (before: it
started beside them without a word, and their records were never restored)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest

from kvstore.errors import InvalidArgumentError, KVStoreError
from kvstore.node.shard_disk import refuse_another_layout
from kvstore.procs import kvstore_process

DISK = ["--disk-size", "16MiB", "--segment-size", "32MiB"]


def _masters(stack: ExitStack) -> tuple[str, str]:
    """One master of a one-shard cluster, and the master list of a cluster of two shards."""
    _, one = stack.enter_context(kvstore_process(["master", "--port", "0"]))
    two = []
    for shard in range(2):
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--shard", str(shard), "--shards", "2"])
        )
        two.append(ready.split()[0])
    return one.split()[0], ";".join(two)


def _node(master: str, disk: Path) -> list[str]:
    return ["node", "--master", master, "--disk", str(disk), *DISK]


def test_each_layout_refuses_the_others_records(tmp_path: Path) -> None:
    one_shard, two_shards = tmp_path / "one" / "tier", tmp_path / "two" / "tier"
    one_shard.parent.mkdir()
    two_shards.parent.mkdir()
    with ExitStack() as stack:
        one, two = _masters(stack)
        for master, disk in ((one, one_shard), (two, two_shards)):  # each writes its own layout
            with kvstore_process(_node(master, disk)):
                pass
        shard_files = [two_shards.parent / f"tier.shard-{i}" for i in (0, 1)]
        assert one_shard.stat().st_size > 0 and all(f.stat().st_size > 0 for f in shard_files)
        assert not two_shards.exists() and not list(one_shard.parent.glob("tier.shard-*"))

        with pytest.raises(KVStoreError, match="one-shard node's records") as refused:
            stack.enter_context(kvstore_process(_node(two, one_shard)))
        assert "start this node with one shard" in str(refused.value)
        assert not list(one_shard.parent.glob("tier.shard-*"))  # nothing written beside them

        with pytest.raises(KVStoreError, match="sharded node's files") as refused:
            stack.enter_context(kvstore_process(_node(one, two_shards)))
        assert all(str(f) in str(refused.value) for f in shard_files)
        assert not two_shards.exists()

        # each layout still starts on its own records
        for master, disk in ((one, one_shard), (two, two_shards)):
            with kvstore_process(_node(master, disk)):
                pass


def test_an_empty_file_or_no_file_is_no_other_layout(tmp_path: Path) -> None:
    disk = tmp_path / "tier"
    refuse_another_layout(str(disk), 2)
    refuse_another_layout(str(disk), 1)
    disk.touch()  # (empty: no records)
    (tmp_path / "tier.shard-0").touch()
    refuse_another_layout(str(disk), 2)
    refuse_another_layout(str(disk), 1)
    disk.write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="one-shard node's records"):
        refuse_another_layout(str(disk), 2)
    (tmp_path / "tier.shard-0").write_bytes(b"x")
    with pytest.raises(InvalidArgumentError, match="sharded node's files"):
        refuse_another_layout(str(disk), 1)
    refuse_another_layout(str(tmp_path / "ti[e]r"), 1)  # (a pattern unescaped, it would match tier.shard-0)
