"""The store's read side: a batch get's values resolved into registered memory for the call, read in
ReadBatches over the staging pipeline's chunks (a chunk's GPU values get their verified bytes while the
next chunk is read), and each value's call-long buffers given back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvstore.client.buffers import BufferManager, SpanList, ValueBuffers
from kvstore.client.deadline import Deadline
from kvstore.client.read_batch import MISS, ReadBatch, ReadTools
from kvstore.errors import InvalidArgumentError
from kvstore.rpc import validate as v


class Reads:
    def __init__(self, tools: ReadTools, buffers: BufferManager) -> None:
        self.tools = tools
        self.buffers = buffers

    def get(self, keys: Sequence[str]) -> list[bytes | None]:
        """Values (None for misses), read through the pre-faulted staging area, one metadata RPC."""
        stats = self.tools.stats
        stats.gets += len(keys)
        found, cached = self.tools.locator.locate(list(keys))
        present = [i for i, entry in enumerate(found) if entry is not None]
        spans: list[ValueBuffers] = [SpanList([self.buffers.scratch(found[i].size)]) for i in present]
        out: list[bytes | None] = [None] * len(keys)
        regrown: list[int] = []  # a cached size was out of date: the value changed since
        try:
            results = self.read(
                [keys[i] for i in present], spans, [found[i] for i in present], [cached[i] for i in present]
            )
            for i, scratch, r in zip(present, spans, results, strict=True):
                assert isinstance(scratch, SpanList)
                out[i] = bytes(scratch.spans[0].view[:r]) if r >= 0 else None
                if r == -InvalidArgumentError.code and cached[i]:
                    regrown.append(i)
        finally:
            for scratch in spans:
                scratch.release(self.buffers)
        if regrown:
            stats.gets -= len(regrown)
            for i, value in zip(regrown, self.get([keys[i] for i in regrown]), strict=True):
                out[i] = value
        return out

    def get_into(
        self,
        keys: list[str],
        buffers: Sequence[Sequence[Any]] | Sequence[ValueBuffers],
        found: list[Any],
        cached: list[bool],
        deadline: Deadline | None = None,
    ) -> list[int]:
        """Per key the bytes read into its buffers (a list each, or its values already resolved by
        BufferManager.piece_values), or a negative code; `found`/`cached` as Locator.locate gives them."""
        self.tools.stats.gets += len(keys)
        values = self.buffers.resolved(buffers, writable=True)
        results: list[int] = []

        def read(start: int, end: int) -> list[int]:
            out = self.read(keys[start:end], values[start:end], found[start:end], cached[start:end], deadline)
            for i, result in enumerate(out):
                if result == MISS and not v.key_ok(keys[start + i]):  # never asked of the master: fails alone
                    out[i] = -InvalidArgumentError.code
            return out

        try:
            results = self.buffers.pipeline.get(values, read)
            return results
        finally:
            self.buffers.release_values(values, results)

    def read(
        self,
        keys: list[str],
        values: Sequence[ValueBuffers],
        found: list[Any],
        cached: list[bool],
        deadline: Deadline | None = None,
    ) -> list[int]:
        """One ReadBatch of located keys into values resolved for the call (see ReadBatch.run)."""
        return ReadBatch(self.tools, keys, values, found, cached, deadline).run()
