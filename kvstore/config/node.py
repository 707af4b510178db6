"""A storage node's configuration: `KVSTORE_NODE_*` variables. The node's client side (master address,
its transfer engine) is a StoreConfig like any client's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvstore.config.component import Component
from kvstore.errors import InvalidArgumentError
from transfer_engine.settings import setting


@dataclass
class NodeConfig(Component):
    """A storage node: the memory it contributes (later also a disk tier)."""

    ENV_PREFIX: ClassVar[str] = "KVSTORE_NODE_"

    segment_size: int = setting(4 << 30, "Bytes of pre-faulted memory this node contributes.", "size")
    buffer_size: int = setting(
        4 << 20, "Staging area of the node's own client (it moves little itself).", "size"
    )
    copy_workers: int = setting(1, "Threads executing the replica copies the master assigns to this node.")
    pinned: bool = setting(
        False,
        "Page-lock the segment (kind host-pinned, DMA-able): registered with the CUDA driver where one is "
        "present, else mlock (needs RLIMIT_MEMLOCK >= the segment size, or CAP_IPC_LOCK).",
    )

    def validate(self) -> None:
        if self.segment_size <= 0:
            raise InvalidArgumentError("a node's segment_size must be positive")
        if self.buffer_size < 4096:
            raise InvalidArgumentError("buffer_size must be at least 4KiB")
        if not 1 <= self.copy_workers <= 64:
            raise InvalidArgumentError("copy_workers must be 1..64")
