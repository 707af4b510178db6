"""KV events off the wire: a publisher's batch (vLLM's and SGLang's ZMQ frames, or RFC #1527 events in the
same three-frame batch, as Mooncake's master sends them) decoded and checked, then applied to the index.

A batch is three frames: topic, sequence number (8 bytes big-endian), msgpack payload
`[timestamp, [event, ...], dp_rank]`. Engine events (`{"type": "BlockStored", ...}`) name blocks by the
engine's own hash (vLLM's sha256 bytes, SGLang's ints): the index recomputes the contract's sequence hash
from their `token_ids` and its parent's, keeping each engine hash's sequence hash for the blocks that
follow and for removals. RFC #1527 events (`{"event_type": "stored", "seq_hashes": [...], ...}`) carry
sequence hashes already.

A kvstore master's events name the namespace of each block keyed by a sequence hash (kvstore.blocks
seq_key: `"namespace": ...` beside `seq_hashes`). A store registered with a namespace credits that
namespace's blocks to every instance of its model (PrefixIndex.store_shared) and ignores the rest; one
registered without (as before) is an instance of its own holding the blocks of keys with no namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import msgpack

from kvstore.errors import ProtocolError
from kvstore.index.hashing import U64, seq_hashes
from kvstore.index.table import Holder, PrefixIndex, Scope, medium_name

MAX_HASH_BYTES = 64  # an engine hash (vLLM's is a 32-byte sha256)
MAX_BLOCKS_PER_EVENT = 1 << 16


class Stored(NamedTuple):
    hashes: list[Any]  # the engine's hashes (int or bytes), or sequence hashes when `standard`
    parent: Any  # the engine hash (sequence hash when standard) of the block before; None at the root
    token_ids: list[int] | None
    block_size: int | None
    medium: str
    lora_name: str
    standard: bool
    namespace: str | None = None  # (a store's block keyed by seq_key: its namespace)


class Removed(NamedTuple):
    hashes: list[Any]
    medium: str
    standard: bool
    namespace: str | None = None


class Cleared(NamedTuple):
    medium: str | None


Event = Stored | Removed | Cleared


class Batch(NamedTuple):
    seq: int
    dp_rank: int | None
    events: list[Event]


def decode_frames(frames: list[bytes]) -> Batch:
    """A batch's three frames, or ProtocolError saying what is wrong."""
    if len(frames) != 3 or len(frames[1]) != 8:
        raise ProtocolError("a KV-event batch is three frames: topic, 8-byte sequence number, payload")
    return decode_payload(int.from_bytes(frames[1], "big", signed=True), frames[2])


def decode_payload(seq: int, payload: bytes) -> Batch:
    try:
        body = msgpack.unpackb(payload, raw=False, strict_map_key=False, use_list=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise ProtocolError(f"KV-event payload is not msgpack: {exc}") from None
    if not isinstance(body, list) or len(body) not in (2, 3) or not isinstance(body[1], list):
        raise ProtocolError("KV-event payload must be [timestamp, [events], dp_rank]")
    rank = body[2] if len(body) == 3 else None
    if rank is not None and not _is_uint(rank, 1 << 31):
        raise ProtocolError("KV-event batch dp_rank must be a non-negative integer")
    return Batch(seq, rank, [_event(e) for e in body[1]])


def _event(e: Any) -> Event:
    if not isinstance(e, dict):
        raise ProtocolError("a KV event must be a map")
    kind = e.get("type")
    if kind == "BlockStored":
        return Stored(
            _hashes(e.get("block_hashes")),
            _hash_or_none(e.get("parent_block_hash")),
            _tokens(e.get("token_ids")),
            _block_size(e.get("block_size")),
            medium_name(_str_or_none(e.get("medium"), "medium")),
            _str_or_none(e.get("lora_name"), "lora_name") or "",
            False,
        )
    if kind == "BlockRemoved":
        medium = _str_or_none(e.get("medium"), "medium")
        return Removed(_hashes(e.get("block_hashes")), medium_name(medium), False)
    if kind == "AllBlocksCleared":
        return Cleared(None)
    kind = e.get("event_type")
    medium = _str_or_none(e.get("medium"), "medium")
    if kind == "stored":
        hashes = _hashes(e.get("seq_hashes"), standard=True)
        return Stored(
            hashes,
            _hash_or_none(e.get("parent_hash"), standard=True),
            _tokens(e.get("token_ids")),
            _block_size(e.get("block_size")),
            medium_name(medium),
            _str_or_none(e.get("lora_name"), "lora_name") or "",
            True,
            _str_or_none(e.get("namespace"), "namespace"),
        )
    if kind == "removed":
        namespace = _str_or_none(e.get("namespace"), "namespace")
        return Removed(_hashes(e.get("seq_hashes"), standard=True), medium_name(medium), True, namespace)
    if kind == "cleared":
        return Cleared(medium_name(medium) if medium else None)
    raise ProtocolError(f"unknown KV event type {kind!r}")


def _is_uint(v: Any, bound: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < bound


def _hash(v: Any, standard: bool) -> Any:
    if isinstance(v, bool):
        raise ProtocolError("a block hash must be an integer or bytes")
    if isinstance(v, int):
        if not -(1 << 63) <= v <= U64:
            raise ProtocolError("an integer block hash must fit 64 bits")
        return v & U64 if standard else v
    if isinstance(v, bytes) and not standard and 0 < len(v) <= MAX_HASH_BYTES:
        return v
    raise ProtocolError("a block hash must be a 64-bit integer (or, from an engine, up to 64 bytes)")


def _hash_or_none(v: Any, standard: bool = False) -> Any:
    return None if v is None else _hash(v, standard)


def _hashes(v: Any, standard: bool = False) -> list[Any]:
    if not isinstance(v, list) or len(v) > MAX_BLOCKS_PER_EVENT:
        raise ProtocolError(f"block hashes must be a list of at most {MAX_BLOCKS_PER_EVENT}")
    return [_hash(h, standard) for h in v]


def _tokens(v: Any) -> list[int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(_is_uint(t, 1 << 32) for t in v):
        raise ProtocolError("token_ids must be a list of integers in [0, 2^32)")
    return v


def _block_size(v: Any) -> int | None:
    if v is not None and not _is_uint(v, 1 << 24):
        raise ProtocolError("block_size must be a positive integer")
    return v or None


def _str_or_none(v: Any, name: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise ProtocolError(f"{name} must be a string")
    return v


@dataclass
class Counts:
    batches: int = 0
    stored: int = 0
    removed: int = 0
    cleared: int = 0
    unplaced: int = 0  # stored blocks whose parent the index never saw (a missed event) or without tokens
    refused: int = 0  # events that contradict the registration (another block size)
    skipped: int = 0  # a store's blocks of another namespace than the one registered (or of none)


class Translator:
    """One publisher's events into the index: its scope, instance and rank, and (for engines that hash
    their own way) each engine hash's sequence hash. With `namespace` (a store's publisher), the blocks
    of that namespace are the store's, credited to every instance of the scope's model."""

    def __init__(
        self,
        index: PrefixIndex,
        scope: Scope,
        instance_id: str,
        dp_rank: int,
        seed: int,
        namespace: str | None = None,
    ) -> None:
        self.index, self.scope, self.seed = index, scope, seed
        self.instance_id, self.dp_rank = instance_id, dp_rank
        self.namespace = namespace
        self.sequence: dict[Any, int] = {}  # engine hash -> sequence hash
        self.scopes: set[Scope] = {scope}  # (one per LoRA it stored blocks of)
        self.media: set[str] = set()
        self.counts = Counts()

    def apply(self, batch: Batch) -> None:
        self.counts.batches += 1
        rank = self.dp_rank if batch.dp_rank is None else batch.dp_rank
        for event in batch.events:
            if isinstance(event, Stored):
                self._stored(event, rank)
            elif isinstance(event, Removed):
                self._removed(event, rank)
            else:
                self.counts.cleared += 1
                self.index.clear(self.instance_id, rank, event.medium)
                if event.medium is None:
                    self.sequence.clear()

    def _mine(self, e: Stored | Removed) -> bool:
        """Whether this publisher's registration covers the event's blocks (only a store's events name a
        namespace: an engine's always are)."""
        if e.namespace == self.namespace:
            return True
        self.counts.skipped += len(e.hashes)
        return False

    def _stored(self, e: Stored, rank: int) -> None:
        if e.block_size is not None and e.block_size != self.scope.block_size:
            self.counts.refused += 1
            return
        if not self._mine(e):
            return
        if self.namespace is not None:
            self.counts.stored += len(e.hashes)
            self.media.add(e.medium)
            self.index.store_shared(self.scope, Holder(self.instance_id, e.medium, rank), e.hashes)
            return
        hashes = e.hashes if e.standard else self._recompute(e)
        if hashes is None:
            self.counts.unplaced += len(e.hashes)
            return
        self.counts.stored += len(hashes)
        scope = self.scope._replace(lora_name=e.lora_name)
        self.scopes.add(scope)
        self.media.add(e.medium)
        self.index.store(scope, Holder(self.instance_id, e.medium, rank), hashes)

    def _recompute(self, e: Stored) -> list[int] | None:
        size = self.scope.block_size
        if e.token_ids is None or len(e.token_ids) != size * len(e.hashes):
            return None
        parent = None
        if e.parent is not None:
            parent = self.sequence.get(e.parent)
            if parent is None:
                return None
        hashes = seq_hashes(e.token_ids, size, self.seed, parent)
        self.sequence.update(zip(e.hashes, hashes, strict=True))
        return hashes

    def _removed(self, e: Removed, rank: int) -> None:
        holder = Holder(self.instance_id, e.medium, rank)
        if not self._mine(e):
            return
        if self.namespace is not None:
            self.counts.removed += len(e.hashes)
            self.index.remove_shared(self.scope, holder, e.hashes)
            return
        hashes = e.hashes if e.standard else [self.sequence[h] for h in e.hashes if h in self.sequence]
        self.counts.removed += len(hashes)
        for scope in self.scopes:
            self.index.remove(scope, holder, hashes)
        if e.standard:
            return
        # An engine hash is forgotten once no medium of this publisher holds its block any more.
        for h in e.hashes:
            digest = self.sequence.get(h)
            places = [(s, holder._replace(medium=m)) for s in self.scopes for m in self.media]
            if digest is not None and not any(self.index.holds(s, h2, digest) for s, h2 in places):
                del self.sequence[h]
