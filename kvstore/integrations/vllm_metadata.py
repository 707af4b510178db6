"""What the vLLM connector's scheduler side tells its workers each step (kvstore.integrations.vllm):
the objects to load and save, block by block."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

# vLLM's BlockPool takes block 0 as the null block: it stands for the blocks a window group skips (a
# full-attention group never holds it).
NULL_BLOCK_ID = 0


@dataclass
class BlockMove:
    """Objects of one request to load or save: per object, its block's sequence hash and digest, its KV
    cache group, and the block id it lives in there (parallel lists)."""

    req_id: str
    seqs: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    block_ids: list[int] = field(default_factory=list)
    unloadable: bool = False  # a load whose target vLLM did not allocate: reported failed, nothing moved

    def add(self, seq: int, digest: str, group: int, block_id: int) -> None:
        self.seqs.append(seq)
        self.digests.append(digest)
        self.groups.append(group)
        self.block_ids.append(block_id)

    def __len__(self) -> int:
        return len(self.seqs)


@dataclass
class KVStoreConnectorMetadata(KVConnectorMetadata):
    loads: list[BlockMove] = field(default_factory=list)  # read before this step's forward pass
    async_loads: list[BlockMove] = field(default_factory=list)  # requests waiting for their KV
    saves: list[BlockMove] = field(default_factory=list)
