"""KV events: the contract's hash, decoding publishers' batches (and refusing bad ones), and applying
them: vLLM-style engine hashes are recomputed from token ids and chained through their parents."""

from __future__ import annotations

import msgpack
import pytest
import xxhash

from kvstore.errors import InvalidArgumentError, ProtocolError
from kvstore.index.events import Translator, decode_frames, decode_payload
from kvstore.index.hashing import DEFAULT_SEED, seq_hashes
from kvstore.index.table import PrefixIndex, Scope

S = Scope("m", 2)


def frames(events: list, seq: int = 0, rank: int | None = 0) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big"), msgpack.packb([1.0, events, rank])]


def stored(hashes: list, tokens: list[int], parent=None, medium="GPU") -> dict:
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": 2, "lora_id": None, "medium": medium, "lora_name": None}  # fmt: skip


def test_the_contract_hash_by_its_definition() -> None:
    tokens = [1, 2, 3, 4, 5]
    h = seq_hashes(tokens, 2)
    le = lambda v: v.to_bytes(8, "little")  # noqa: E731
    local = [xxhash.xxh3_64_intdigest(bytes.fromhex("01000000" "02000000"), DEFAULT_SEED),
             xxhash.xxh3_64_intdigest(bytes.fromhex("03000000" "04000000"), DEFAULT_SEED)]  # fmt: skip
    assert h == [local[0], xxhash.xxh3_64_intdigest(le(local[0]) + le(local[1]), DEFAULT_SEED)]
    assert seq_hashes(tokens[2:4], 2, parent=h[0]) == h[1:]  # continuing from a parent
    for bad in ([-1], [2**32], [[1]], ["a"]):
        with pytest.raises(InvalidArgumentError):
            seq_hashes(bad, 1)


def test_vllm_events_are_rehashed_from_tokens_and_chained() -> None:
    index = PrefixIndex()
    t = Translator(index, S, "inst", 0, DEFAULT_SEED)
    tokens = [5, 6, 7, 8, 9, 10]
    t.apply(decode_frames(frames([stored([b"A" * 32, b"B" * 32], tokens[:4])])))
    t.apply(decode_frames(frames([stored([b"C" * 32], tokens[4:], parent=b"B" * 32)], seq=1)))
    want = seq_hashes(tokens, 2)
    assert index.match(S, want)["inst"].longest == 3
    t.apply(decode_frames(frames([stored([b"Z" * 32], [1, 1], parent=b"unknown")], seq=2)))
    assert t.counts.unplaced == 1  # a parent never seen: not placed anywhere
    t.apply(
        decode_frames(frames([{"type": "BlockRemoved", "block_hashes": [b"B" * 32], "medium": "GPU"}], 3))
    )
    assert index.match(S, want)["inst"].longest == 1 and b"B" * 32 not in t.sequence
    t.apply(decode_frames(frames([{"type": "AllBlocksCleared"}], seq=4)))
    assert index.match(S, want) == {} and not t.sequence


def test_standard_events_carry_their_sequence_hashes() -> None:
    index = PrefixIndex()
    t = Translator(index, S, "store", 0, DEFAULT_SEED)
    h = seq_hashes(list(range(8)), 2)
    first = {"event_type": "stored", "seq_hashes": h, "medium": "cpu", "block_size": 2, "parent_hash": None}
    t.apply(decode_payload(0, msgpack.packb([1.0, [first], None])))
    t.apply(
        decode_payload(
            1, msgpack.packb([1.0, [{"event_type": "stored", "seq_hashes": h[:2], "medium": "disk"}]])
        )
    )
    m = index.match(S, h)["store"]
    assert (m.longest, m.media) == (4, {"CPU": 4, "DISK": 2})
    t.apply(decode_payload(2, msgpack.packb([1.0, [{"event_type": "cleared", "medium": "cpu"}]])))
    assert index.match(S, h)["store"].media == {"DISK": 2}
    t.apply(
        decode_payload(3, msgpack.packb([1.0, [{"event_type": "stored", "seq_hashes": h, "block_size": 4}]]))
    )
    assert t.counts.refused == 1  # another block size than registered


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgpack.packb({"a": 1}),
        msgpack.packb([1.0, "events"]),
        msgpack.packb([1.0, [], -1]),
        msgpack.packb([1.0, [1]]),
        msgpack.packb([1.0, [{"type": "Nope"}]]),
        msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": "x"}]]),
        msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [1.5]}]]),
        msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [b"x" * 65]}]]),
        msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [1], "token_ids": [-1]}]]),
        msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [1], "medium": 3}]]),
        msgpack.packb([1.0, [{"event_type": "stored", "seq_hashes": [b"bytes"]}]]),
        msgpack.packb([1.0, [{"event_type": "removed", "seq_hashes": [True]}]]),
    ],
)
def test_bad_batches_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_payload(0, payload)


def test_frames_must_be_three_with_an_eight_byte_sequence() -> None:
    for bad in ([b"", b"\0" * 8], [b"", b"\0" * 7, msgpack.packb([1.0, []])]):
        with pytest.raises(ProtocolError):
            decode_frames(bad)
