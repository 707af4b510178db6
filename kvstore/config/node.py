"""A storage node's configuration: `KVSTORE_NODE_*` variables. The node's client side (master address,
its transfer engine) is a StoreConfig like any client's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from kvstore.config.component import Component
from kvstore.errors import InvalidArgumentError
from transfer_engine.settings import setting
from transfer_engine.units import format_size

NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
DISK_ALIGN = 4096  # a disk tier's size is a multiple of it (O_DIRECT's unit)
MIN_STAGING = 1 << 20  # the least staging a disk tier is given
# The least segment a node contributes: its fence table alone is 192 KiB (4,096 slots of 48 bytes, at least:
# kvstore.node.memory_tier.fence_slots_for) and its shared memory is mapped in 4 KiB pages (2 MiB huge pages
# on hugetlbfs), so a smaller one costs more than it holds.
MIN_SEGMENT = 1 << 20


@dataclass
class NodeConfig(Component):
    """A storage node: the memory it contributes, and optionally a disk tier under it."""

    ENV_PREFIX: ClassVar[str] = "KVSTORE_NODE_"

    name: str = setting(
        "",
        "This node's name on its host, part of its identity (a node restarted with the same identity "
        "takes over its old registration and records at once); empty: derived from its settings.",
    )
    segment_size: int = setting(
        4 << 30, "Bytes of pre-faulted memory this node contributes (at least 1MiB).", "size"
    )
    buffer_size: int = setting(
        4 << 20, "Staging area of the node's own client (it moves little itself).", "size"
    )
    copy_workers: int = setting(1, "Threads executing the replica copies the master assigns to this node.")
    pinned: bool = setting(
        False,
        "Page-lock the segment (kind host-pinned, DMA-able): registered with the CUDA driver where one is "
        "present, else mlock (needs RLIMIT_MEMLOCK >= the segment size, or CAP_IPC_LOCK).",
    )

    memory_dir: str = setting(
        "/dev/shm",
        "Directory of the shared-memory file that is the segment (tmpfs or hugetlbfs), named by the node's "
        "identity: a node killed and started again with the same settings keeps its objects. A directory "
        "without room for the segment is refused at start. Empty: anonymous memory, lost with the process.",
    )

    disk: str = setting(
        "", "Path of the disk tier's file (created and preallocated) or block device; empty: none."
    )
    disk_size: int = setting(
        0, "Bytes of the disk tier (a multiple of 4KiB; 0 on a device: all of it).", "size"
    )
    disk_backend: str = setting("auto", "Disk I/O: auto (io_uring, else threads), io_uring or threads.")
    disk_staging: int = setting(64 << 20, "Aligned memory the disk tier moves records through.", "size")

    def validate(self) -> None:
        if self.name and not NAME.fullmatch(self.name):
            raise InvalidArgumentError("a node's name is 1-64 letters, digits, '.', '_' or '-'")
        if self.segment_size < MIN_SEGMENT:
            raise InvalidArgumentError(
                f"a node's segment_size must be at least 1MiB, not {format_size(self.segment_size)}: "
                "smaller, its fence table (192 KiB) and pages cost more than it holds"
            )
        if self.buffer_size < 4096:
            raise InvalidArgumentError("buffer_size must be at least 4KiB")
        if not 1 <= self.copy_workers <= 64:
            raise InvalidArgumentError("copy_workers must be 1..64")
        if self.disk_backend not in ("auto", "io_uring", "threads"):
            raise InvalidArgumentError("disk_backend must be auto, io_uring or threads")
        if self.disk and (self.disk_size < 0 or self.disk_size % DISK_ALIGN):
            raise InvalidArgumentError("disk_size must be a multiple of 4KiB")
        if self.disk_staging < MIN_STAGING:
            raise InvalidArgumentError("disk_staging must be at least 1MiB")
