"""Requests declared once: a request is a dataclass whose field types carry their wire rules
(``Annotated[str, Text()]``, ``Annotated[int, Int(1, U64), Omitted.ABSENT]``), and everything else comes
from that one declaration when the class is made (``@request``): its parser, which checks every field a
peer sends with the checks of kvstore.rpc.validate (the same bounds and messages), its parameter names,
and its row in REQUESTS. The master's handler of a request is its method named by METHOD.

Parsers are built once, at import: a tuple of one reader per field, no look at the declaration per call
(parse is on the master's hot path).
"""

from __future__ import annotations

import enum
import functools
import itertools
import typing
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Annotated, Any, ClassVar, NamedTuple, TypeVar

from kvstore.errors import InvalidArgumentError
from kvstore.rpc import validate as v

Params = dict[str, Any]
Reader = Callable[[Params], Any]
U64 = 2**64 - 1


class Kind:
    """How one field is read off a request's parameters (and checked)."""

    def reader(self, name: str) -> Reader:
        raise NotImplementedError

    def plain_bound(self) -> tuple[int, int] | str | None:
        """Its bound in validate.plain_records' terms (a batch of records checked in C loops), or None."""
        return None


class Text(Kind):
    """A non-empty string of at most `most` bytes (names, ids, engines, hosts)."""

    def __init__(self, most: int = v.MAX_NAME) -> None:
        self.most = most

    def reader(self, name: str) -> Reader:
        return functools.partial(v.text, name=name, max_len=self.most)


class Token(Kind):
    """A registration token or proof: 32 to 128 hex digits."""

    def reader(self, name: str) -> Reader:
        return functools.partial(v.token, name=name)


class Int(Kind):
    """An integer (not a bool) in [low, high]."""

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def reader(self, name: str) -> Reader:
        return functools.partial(v.integer, name=name, low=self.low, high=self.high)

    def plain_bound(self) -> tuple[int, int]:
        return (self.low, self.high)


class Flag(Kind):
    """A boolean; `default` when the request leaves it out."""

    def __init__(self, default: bool = False) -> None:
        self.default = default

    def reader(self, name: str) -> Reader:
        return functools.partial(v.flag, name=name, default=self.default)

    def plain_bound(self) -> str:
        return "flag"


class Key(Kind):
    """One object key (validate.KEY_RULE)."""

    def reader(self, name: str) -> Reader:
        return lambda p: v.key(v.field(p, name))

    def plain_bound(self) -> str:
        return "key"


class Keys(Kind):
    """A list of at most validate.MAX_KEYS keys."""

    def reader(self, name: str) -> Reader:
        return functools.partial(v.keys, name=name)


class Ids(Kind):
    """A list of at most `most` ids in [1, 2**64) (`what` names them in the error)."""

    def __init__(self, what: str, most: int) -> None:
        self.what, self.most = what, most

    def reader(self, name: str) -> Reader:
        return functools.partial(v.ids, name=name, what=self.what, most=self.most)


class Read(Kind):
    """A field read by its own function, given the parameters and the field's name."""

    def __init__(self, read: Callable[[Params, str], Any]) -> None:
        self.read = read

    def reader(self, name: str) -> Reader:
        read = self.read
        return lambda p: read(p, name)


class Omitted(enum.Enum):
    """When a request may leave a field out (the field's default then). Without one, it is required."""

    ABSENT = "absent"  # not in the parameters
    FALSY = "falsy"  # absent, or a false value ("", 0, None, ...)
    NONE = "none"  # absent, or None
    EMPTY = "empty"  # absent, or ""


class With(NamedTuple):
    """The field is read only when the request gives `other` (a true value); else it is its default."""

    other: str


Name = Annotated[str, Text()]
"""A non-empty string of at most validate.MAX_NAME bytes: client ids, hosts, engines."""
OwnToken = Annotated[str, Token(), Omitted.FALSY]
"""The client's registration token, on a request made in its own name (kvstore.rpc.messages.OWN_NAME)."""


def _rules(owner: type, name: str, hint: Any) -> tuple[Kind, Omitted | None, With | None]:
    if typing.get_origin(hint) is not typing.Annotated:
        raise TypeError(f"{owner.__name__}.{name} declares no wire rule (Annotated[type, Kind])")
    extras = typing.get_args(hint)[1:]
    kinds = [x for x in extras if isinstance(x, Kind)]
    if len(kinds) != 1:
        raise TypeError(f"{owner.__name__}.{name} must declare one Kind")
    omitted = next((x for x in extras if isinstance(x, Omitted)), None)
    given = next((x for x in extras if isinstance(x, With)), None)
    return kinds[0], omitted, given


def _field_reader(name: str, kind: Kind, omitted: Omitted | None, given: With | None, default: Any) -> Reader:
    """The field's reader, with its default where the request may leave it out. `default()` makes it."""
    read = kind.reader(name)
    if omitted is not None:
        read = _or_default(read, name, omitted, default)
    if given is not None:
        other, inner = given.other, read

        def read(p: Params) -> Any:
            return inner(p) if p.get(other) else default()

    return read


def _or_default(read: Reader, name: str, omitted: Omitted, default: Callable[[], Any]) -> Reader:
    """`read`, or `default()` where `omitted` says the field was left out (one closure per rule: the
    test is inlined, a parse calls nothing more per field)."""
    if omitted is Omitted.ABSENT:
        return lambda p: read(p) if name in p else default()
    if omitted is Omitted.FALSY:
        return lambda p: read(p) if p.get(name) else default()
    if omitted is Omitted.NONE:
        return lambda p: default() if p.get(name) is None else read(p)
    return lambda p: default() if p.get(name, "") == "" else read(p)


def _default_of(f: Any) -> Callable[[], Any] | None:
    if f.default is not MISSING:
        return itertools.repeat(f.default).__next__  # (a C call)
    if f.default_factory is not MISSING:
        return typing.cast(Callable[[], Any], f.default_factory)
    return None


def _reader_of(owner: type, f: Any, hint: Any) -> Reader:
    kind, omitted, given = _rules(owner, f.name, hint)
    default = _default_of(f)
    if default is None and (omitted or given):
        raise TypeError(f"{owner.__name__}.{f.name} may be left out but has no default")
    return _field_reader(f.name, kind, omitted, given, default)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


class Request:
    """Base of the request records. ``METHOD`` names it on the wire (and its handler in the master)."""

    METHOD: ClassVar[str]
    FIELDS: ClassVar[frozenset[str]] = frozenset()  # the parameter names (from the declaration)
    _parse: ClassVar[Callable[[Params], Request]]

    def params(self) -> dict[str, Any]:
        return dict(vars(self))  # the dataclass fields, without a per-call fields() walk

    @classmethod
    def parse(cls, p: Params) -> Request:
        """The request its parameters make; InvalidArgumentError naming the first field that does not fit
        (in declaration order)."""
        return cls._parse(p)

    def check(self) -> None:
        """Rules across fields, after each was read (none unless a request declares some)."""

    @staticmethod
    def decode_reply(obj: Any) -> Any:
        return obj

    @staticmethod
    def decode_frame(msg_id: int, body: bytes | bytearray | memoryview) -> Any | None:
        """The reply frame's body (its msgpack) read into decode_reply's records in one step, or None where
        it is not a success of the common shape for request `msg_id` (then: unpack, decode_reply). None
        here: a request whose replies a client decodes in bulk says how (GetReplicas)."""
        return None


REQUESTS: dict[str, type[Request]] = {}
"""Every request by its METHOD, in declaration order."""

R = TypeVar("R", bound=type[Request])


def request(cls: R) -> R:
    """Registers a request dataclass and builds its parser from its declaration (apply over @dataclass)."""
    if cls.METHOD in REQUESTS:
        raise TypeError(f"two requests declare method {cls.METHOD!r}")
    hints = _hints(cls)
    readers = tuple(
        _reader_of(cls, f, hints[f.name])
        for f in fields(cls)  # type: ignore[arg-type]
    )
    make = cls
    if cls.check is Request.check:

        def parse(p: Params) -> Request:
            return make(*[read(p) for read in readers])

    else:

        def parse(p: Params) -> Request:
            built = make(*[read(p) for read in readers])
            built.check()
            return built

    cls._parse = parse
    cls.FIELDS = frozenset(f.name for f in fields(cls))  # type: ignore[arg-type]
    REQUESTS[cls.METHOD] = cls
    return cls


# -- records inside requests ---------------------------------------------------------------------------
T = TypeVar("T", bound=tuple[Any, ...])


class Records(Kind):
    """A list of at most `most` records of the NamedTuple `record`, whose field types carry their rules
    as a request's do; each entry a list (or tuple, when `tuples`) of its fields, the fields from `least`
    on optional (their defaults). `shape`: the error for an entry of another shape (by default, one that
    lists the fields). With `plain`, a batch of plain records is checked in C loops first (the usual case
    on the master's restore path)."""

    def __init__(
        self,
        record: type[tuple[Any, ...]],
        what: str = "",
        most: int = v.MAX_KEYS,
        shape: str = "",
        least: int | None = None,
        plain: bool = False,
        tuples: bool = True,
    ) -> None:
        self.what, self.most = what, most
        self.entries = entries(record, shape, least, tuples)
        self.plain = plain_bounds(record) if plain else None
        self.record = record

    def reader(self, name: str) -> Reader:
        entries, plain, what, most, record = self.entries, self.plain, self.what, self.most, self.record

        def read(p: Params) -> list[Any]:
            raw = v.bounded_list(p, name, what, most)
            if plain is not None:
                ok = v.plain_records(raw, plain)
                if ok is not None:
                    return list(map(tuple.__new__, itertools.repeat(record), ok))
            return entries(raw)

        return read


def plain_bounds(record: type[tuple[Any, ...]]) -> tuple[tuple[int, int] | str, ...]:
    """A record's field bounds in validate.plain_records' terms (each field's Kind must have one)."""
    hints = _hints(record)
    bounds = []
    for name in record._fields:  # type: ignore[attr-defined]
        bound = _rules(record, name, hints[name])[0].plain_bound()
        if bound is None:
            raise TypeError(f"{record.__name__}.{name} has no plain bound")
        bounds.append(bound)
    return tuple(bounds)


def entries(
    record: type[T], shape: str = "", least: int | None = None, tuples: bool = True
) -> Callable[[list[Any]], list[T]]:
    """Checks and builds each entry of a list of `record`s (see Records)."""
    names: tuple[str, ...] = record._fields  # type: ignore[attr-defined]
    hints = _hints(record)
    readers = tuple(_rules(record, name, hints[name])[0].reader(name) for name in names)
    defaults = record._field_defaults  # type: ignore[attr-defined]
    lengths = range(len(names) if least is None else least, len(names) + 1)
    shapes = (list, tuple) if tuples else (list,)
    shape = shape or "each record is [" + ", ".join(names) + "]"
    new = tuple.__new__

    def build(raw: list[Any]) -> list[T]:
        out = []
        for entry in raw:
            if not isinstance(entry, shapes) or len(entry) not in lengths:
                raise InvalidArgumentError(shape)
            given = {**defaults, **dict(zip(names, entry, strict=False))}  # (a short entry: defaults)
            out.append(new(record, [read(given) for read in readers]))
        return out

    return build
