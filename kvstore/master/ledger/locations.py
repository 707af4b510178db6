"""The master's replicas of every tier as readers see them: one Location record each (kvstore.rpc)."""

from __future__ import annotations

from typing import NamedTuple

from kvstore.master.ledger.model import DiskReplica, Replica
from kvstore.rpc import messages as m
from kvstore.rpc.disk_record import data_offset


class SegmentPlace(NamedTuple):
    """What the Location of a copy on a memory segment starts with, kept per segment (Objects.places):
    ObjectTable.locate_many (C++) reads it as a tuple and writes it as the Location's first fields."""

    tier: int
    host_id: str
    engine: str
    region_id: int


if SegmentPlace._fields != m.Location._fields[: len(SegmentPlace._fields)]:
    raise TypeError(f"SegmentPlace {SegmentPlace._fields} is not how a Location {m.Location._fields} starts")


def memory_location(replica: Replica) -> m.Location:
    seg = replica.segment
    return m.Location(
        replica.tier, seg.host_id, seg.engine, seg.region_id, replica.offset, replica.slot, replica.gen
    )


def disk_location(record: DiskReplica, on_its_host: bool) -> m.Location:
    """A reader on the disk's host reads the record from its file itself; any other through the node's
    engine, which serves the file as a region (unfenced: the checksum guards a record reused since)."""
    seg = record.segment
    at = data_offset(record.offset)
    if on_its_host:
        return m.Location(record.tier, seg.host_id, "", 0, at, 0, 0, seg.path)
    return m.Location(record.tier, seg.host_id, seg.engine, seg.file_region, at, 0, 0)
