"""Stand-in for lmcache's RemoteConnector base (LMCache 0.5.6): the chunk geometry its constructor
derives from the engine metadata, and the partial-chunk reshape (numpy dtypes here, torch there)."""

from __future__ import annotations

import math
from typing import Any


class RemoteConnector:
    def __init__(self, config: Any, metadata: Any) -> None:
        assert metadata is not None
        extra = getattr(config, "extra_config", None)
        self.save_chunk_meta = extra is None or extra.get("save_chunk_meta", True)
        self.meta_shapes = metadata.get_shapes()
        self.meta_dtypes = metadata.get_dtypes()
        self.meta_fmt = "KV_2LTD"
        self.full_chunk_size_bytes = sum(
            math.prod(s) * d.itemsize for s, d in zip(self.meta_shapes, self.meta_dtypes, strict=True)
        )
        self.single_token_size = self.full_chunk_size_bytes // metadata.chunk_size
        self.remote_metadata_bytes = 64

    def reshape_partial_chunk(self, memory_obj: Any, bytes_read: int) -> Any:
        if bytes_read == 0 or bytes_read % self.single_token_size or bytes_read > self.full_chunk_size_bytes:
            raise ValueError(f"bytes_read: {bytes_read} is illegal")
        memory_obj.valid_bytes = bytes_read
        return memory_obj
