"""Getters of the fields of the records a read works with (kvstore.rpc.records.ObjectLocation and
Location), each made by name from the record's declaration. They are itemgetters: mapped over a batch
they take a column in C (an attrgetter measured ~25% slower); a single field of one record reads
fastest as its attribute."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from kvstore.rpc import messages as m


def field(record: Any, name: str) -> Callable[[Any], Any]:
    """A getter of the field `name` of the NamedTuple `record`, by its declared place (ValueError at import
    when the declaration has no such field)."""
    return operator.itemgetter(record._fields.index(name))


first = operator.itemgetter(0)  # a sequence's first item (a value's first piece, a key's first location)

size_of, checksum_of, locations_of = (field(m.ObjectLocation, n) for n in ("size", "checksum", "locations"))
engine_of, region_of, offset_of, slot_of, gen_of = (
    field(m.Location, n) for n in ("engine", "region_id", "offset", "slot", "gen")
)
