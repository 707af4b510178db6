"""The master's C++ object table reads and writes some RPC records by position (kvstore._meta
.ObjectTable: adopt_many takes RestoreSegment's records, locate_many writes get_replicas' Locations):
its field order must be the declaration's. Records built here by name, with a distinct value in every
field, go through the table and come back decoded by the declaration, each field where it was named."""

from __future__ import annotations

from kvstore._meta import ObjectTable
from kvstore.rpc import messages as m
from kvstore.rpc.framing import Packed

SEGMENT = 7


def _restored_table(record: m.RestoreRecord) -> ObjectTable:
    table = ObjectTable(seed=1)
    # The table adopts a record less its trailing target (kvstore.master.service.restore applies a named
    # target as a record of its own)
    added = table.adopt_many(SEGMENT, [record[:-1]], 3, 100.0, 64)
    assert added == record.size
    return table


def test_a_restore_record_lands_in_the_table_field_by_field() -> None:
    record = m.RestoreRecord(
        offset=4096, slot=17, gen=2**40 + 5, key="k", size=12345, checksum=2**63 + 9, pinned=True, replicas=3
    )
    assert record._fields == m.RESTORE_FIELDS
    table = _restored_table(record)
    ref = table.find(record.key)
    assert ref is not None
    assert table.size(ref) == record.size and table.checksum(ref) == record.checksum
    assert table.pinned(ref) is record.pinned and table.base_replicas(ref) == record.replicas
    assert table.complete(ref) and table.writer(ref) == 3


def test_a_location_the_table_writes_decodes_field_by_field() -> None:
    record = m.RestoreRecord(
        offset=8192, slot=23, gen=2**33 + 1, key="k", size=99, checksum=77, pinned=False, replicas=1
    )
    table = _restored_table(record)
    want = m.Location(
        tier=m.MEMORY,
        host_id="host-a",
        engine="127.0.0.1:7000",
        region_id=2**32 + 3,
        offset=record.offset,
        slot=record.slot,
        gen=record.gen,
        path="",
    )
    # The place of a segment is a Location's leading fields (the master's ledger keeps them per segment)
    head = m.Location._fields[:4]
    places = {SEGMENT: tuple(getattr(want, name) for name in head)}
    reply, hits, _, _ = table.locate_many(["k", "missing"], False, 200.0, 210.0, 60.0, 1e9, places, False)
    assert hits == ["k"]
    found, miss = m.GetReplicas.decode_reply(Packed(reply).value())
    assert miss is None and found is not None
    assert (found.size, found.checksum) == (record.size, record.checksum)
    (location,) = found.locations
    assert location._asdict() == want._asdict()
