"""A node's disk tier when its cluster is split over shards: a file per shard beside the one named
('<disk>.shard-<i>'), so each shard's records, catalog and restore are its own, as its memory part is.

A disk file's records are read back only by a node of the same layout: a node of several shards never
reads '<disk>' itself, and a node of one shard never reads '<disk>.shard-<i>'. A node that finds the
other layout's records refuses to start, saying what to do, rather than leave them unread for ever.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import stat

from kvstore.config import NodeConfig
from kvstore.config.node import DISK_ALIGN, MIN_STAGING
from kvstore.errors import InvalidArgumentError

SHARD_SUFFIX = ".shard-"


def disk_of_shard(part: NodeConfig, shard: int, shards: int) -> NodeConfig:
    """Shard `shard`'s disk tier: its own file beside the one named, an even part of disk_size. A block
    device has no room for a file beside it: refused."""
    if os.path.exists(part.disk) and stat.S_ISBLK(os.stat(part.disk).st_mode):
        raise InvalidArgumentError(
            f"the disk tier {part.disk} is a block device, which a node of {shards} shards cannot split: "
            f"give a file path (each shard gets '<path>{SHARD_SUFFIX}<i>'), or run one node per shard"
        )
    size = part.disk_size // shards // DISK_ALIGN * DISK_ALIGN
    if part.disk_size and not size:
        raise InvalidArgumentError(f"disk_size {part.disk_size} is too small to split over {shards} shards")
    staging = max(MIN_STAGING, part.disk_staging // shards // DISK_ALIGN * DISK_ALIGN)
    return dataclasses.replace(
        part, disk=f"{part.disk}{SHARD_SUFFIX}{shard}", disk_size=size, disk_staging=staging
    )


def refuse_another_layout(disk: str, shards: int) -> None:
    """Refuses a disk tier whose records another layout wrote: a non-empty file at `disk` itself for a
    node of several shards (a one-shard node's), '<disk>.shard-<i>' files for a node of one."""
    if shards > 1:
        if _records_at(disk):
            raise InvalidArgumentError(
                f"the disk tier {disk} holds a one-shard node's records, which a node of {shards} shards "
                f"does not read (each shard keeps its own file, '{disk}{SHARD_SUFFIX}<i>'): start this node "
                "with one shard to serve them, or move or remove the file to start it without them"
            )
        return
    sharded = sorted(p for p in glob.glob(glob.escape(disk) + SHARD_SUFFIX + "*") if _records_at(p))
    if sharded:
        raise InvalidArgumentError(
            f"the disk tier {disk} has a sharded node's files beside it ({', '.join(sharded)}), which a "
            f"node of one shard does not read: start this node with its {len(sharded)} shards to serve "
            "them, or move or remove them to start it without them"
        )


def _records_at(path: str) -> bool:
    """A regular file with something in it (a block device or an empty file holds no other layout's)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size > 0
