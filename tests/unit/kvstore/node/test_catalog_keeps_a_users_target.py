"""A user's pinned count (change_replica) rides in a node's holds as a field of its own (HeldReplica.target,
RestoreRecord.target): the node keeps it in its catalog, across its own restart, and names it back. What
the previous version wrote or sent without it (a hold of ten fields, a catalog record of eight) reads as
no target, so such a node restores as it did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import xxhash

from kvstore.errors import InvalidArgumentError, ProtocolError
from kvstore.node.catalog import SegmentCatalog
from kvstore.rpc import messages as m
from tests.helpers.rpc_wire_corpus import HOLD


def _hold(slot: int, data: np.ndarray, key: str, target: int) -> list[object]:
    """A hold as the master sends it: its fields, the target last (absent: none given)."""
    digest = xxhash.xxh3_64_intdigest(data.data)
    fields: list[object] = [slot + 1, 1, slot * 4096, slot, 10 + slot, key, data.size, digest, False, 1]
    return [*fields, target] if target >= 0 else fields


def _work(holds: list[Any]) -> m.NodeWork:
    return m.AwaitWork.decode_reply([0, [], holds, [], [], [], []])


def test_a_hold_names_its_target_and_one_without_reads_none() -> None:
    work = _work([[*HOLD, 3], list(HOLD)])
    assert [(h.replicas, h.target) for h in work.holds] == [(2, 3), (2, 0)]
    assert all(type(h) is m.HeldReplica and len(h) == len(m.HeldReplica._fields) for h in work.holds)
    for bad in ([[*HOLD, 3, 4]], [HOLD[:-1]], [7], [list(HOLD), "x"]):
        with pytest.raises(ProtocolError, match="malformed HeldReplica"):
            _work(bad)


def test_the_catalog_names_back_the_target_after_a_restart(tmp_path: Path) -> None:
    memory = np.random.default_rng(3).integers(0, 256, 1 << 15, dtype=np.uint8)
    path = str(tmp_path / "segment.held")
    catalog = SegmentCatalog(path)
    pinned, plain = (memory[s * 4096 : (s + 1) * 4096] for s in range(2))
    catalog.hold(_work([_hold(0, pinned, "pinned", 2), _hold(1, plain, "plain", 0)]).holds)
    catalog.close()
    offered = SegmentCatalog(path).verified(memory)  # (the node restarted on its segment)
    assert {r.key: (r.replicas, r.target) for r in offered} == {"pinned": (1, 2), "plain": (1, 0)}
    request = m.RestoreSegment(client_id="n", segment_id=1, records=offered, last=True)
    sent = msgpack.unpackb(msgpack.packb(request.params()))
    parsed = m.RestoreSegment.parse(sent)
    assert {r.key: r.target for r in parsed.records} == {"pinned": 2, "plain": 0}


def test_a_catalog_the_previous_version_wrote_restores_with_no_target(tmp_path: Path) -> None:
    """Its records are eight fields (a hold of ten, less seq and region): each names no target."""
    memory = np.random.default_rng(4).integers(0, 256, 1 << 14, dtype=np.uint8)
    path = str(tmp_path / "segment.held")
    catalog = SegmentCatalog(path)
    catalog.hold([tuple(_hold(0, memory[:4096], "old", -1))])  # (ten fields, as the previous version kept)
    catalog.close()
    (record,) = SegmentCatalog(path).verified(memory)
    assert (record.key, record.replicas, record.target) == ("old", 1, 0)


def test_a_restore_record_without_its_target_parses_as_none() -> None:
    """A node of the previous version names eight fields; a target out of bounds is refused."""
    record = [0, 1, 2, "k", 4096, 7, False, 3]
    parsed = m.RestoreSegment.parse({"client_id": "n", "segment_id": 1, "records": [record], "last": True})
    assert parsed.records == [m.RestoreRecord(0, 1, 2, "k", 4096, 7, False, 3, 0)]
    with pytest.raises(InvalidArgumentError, match="target"):
        m.RestoreSegment.parse({"client_id": "n", "segment_id": 1, "records": [[*record, 65]], "last": True})
