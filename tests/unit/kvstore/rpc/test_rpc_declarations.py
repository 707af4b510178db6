"""A request is declared once (kvstore.rpc.schema): its dataclass's field types carry the wire rules, and
its parser, parameter names and row in REQUESTS come from it at import. Every request class is
registered, a declaration without a rule is refused when the class is made, parsing looks nothing up in
the declaration per call, and a request's records come back by name."""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from typing import Annotated, ClassVar

import pytest

from kvstore.rpc import messages as m
from kvstore.rpc import schema
from tests.helpers import rpc_wire_corpus as corpus


def _subclasses(cls: type[m.Request]) -> set[type[m.Request]]:
    """The package's subclasses of cls (not the refused ones a test here declares)."""
    found: set[type[m.Request]] = {c for c in cls.__subclasses__() if c.__module__.startswith("kvstore.")}
    return found.union(*(_subclasses(c) for c in found)) if found else set()


def test_every_request_class_is_in_the_table_by_its_method() -> None:
    declared = _subclasses(m.Request)
    assert declared == set(m.REQUESTS.values())
    assert all(m.REQUESTS[cls.METHOD] is cls for cls in declared)


def test_each_request_names_its_fields_once() -> None:
    for cls in m.REQUESTS.values():
        assert {f.name for f in fields(cls)} == cls.FIELDS  # type: ignore[arg-type]


def test_own_name_is_every_request_with_a_token_but_registration() -> None:
    with_token = {cls for cls in m.REQUESTS.values() if "token" in cls.FIELDS}
    assert with_token - {m.RegisterClient} == m.OWN_NAME and m.PutStart in m.OWN_NAME


def test_a_field_without_a_wire_rule_is_refused_when_declared() -> None:
    with pytest.raises(TypeError, match=r"Undeclared\.count declares no wire rule"):

        @schema.request
        @dataclass
        class Undeclared(m.Request):
            METHOD: ClassVar[str] = "undeclared_for_test"
            count: int

    with pytest.raises(TypeError, match=r"two requests declare method 'exists'"):

        @schema.request
        @dataclass
        class Twice(m.Request):
            METHOD: ClassVar[str] = "exists"
            keys: Annotated[list[str], schema.Keys()]

    assert "undeclared_for_test" not in m.REQUESTS and m.REQUESTS["exists"] is m.Exists


def test_parsing_reads_no_declaration(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parsers were built at import: a parse never looks at the type hints again (the hot path)."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a parse looked at the declaration")

    monkeypatch.setattr(typing, "get_type_hints", refused)
    monkeypatch.setattr(schema, "fields", refused)
    for method, (good, _) in corpus.GOOD.items():
        assert method == m.parse_request(method, good).METHOD


def test_records_inside_requests_come_back_by_name() -> None:
    good, _ = corpus.GOOD["restore_segment"]
    request = m.parse_request("restore_segment", {**good, "records": [corpus.RECORD]})
    (record,) = request.records  # type: ignore[attr-defined]
    assert isinstance(record, m.RestoreRecord) and record.key == "k" and record.replicas == 3
    (removal,) = request.removed  # type: ignore[attr-defined]
    assert removal == m.Removal(key="gone", generation=4)
    disk = m.parse_request("restore_disk", corpus.GOOD["restore_disk"][0])
    assert [r.gen for r in disk.records] == [3, 0]  # type: ignore[attr-defined]  # (a short one: 0)
    report = m.parse_request("report_replicas", corpus.GOOD["report_replicas"][0])
    assert report.corrupt[0].region_id == 3  # type: ignore[attr-defined]
    assert m.RESTORE_BOUNDS[m.RESTORE_FIELDS.index("slot")] == (0, 2**26)
