"""One loader of typed settings for every component (engine, store client, node, master).

A component's config is a dataclass whose fields are declared with :func:`setting` (a default, a kind
and a line of documentation). Values come from three places; the highest wins:

1. code: arguments given to ``Config.load(...)`` (or to ``TransferEngine(...)``, ``Store.connect(...)``);
2. the environment: ``<PREFIX><FIELD>`` in upper case, e.g. ``KVSTORE_TCP_CONNECTIONS``;
3. the defaults in the dataclass.

Every loaded config remembers where each value came from (``origins``); ``kvstore config`` prints them.
Bad values are errors that name the setting and, for the environment, the variable.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from transfer_engine.errors import InvalidArgumentError
from transfer_engine.units import parse_size

KINDS = ("int", "size", "seconds", "bool", "str", "float", "port", "secret")  # secret: a str never printed


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from: "default", "environment" (with the variable) or "code"."""

    source: str
    variable: str = ""

    def __str__(self) -> str:
        return f"{self.source} {self.variable}".strip()


DEFAULT = Origin("default")
CODE = Origin("code")


def setting(default: Any, doc: str, kind: str | None = None, optional: bool = False) -> Any:
    """A config field: default, documentation, and the kind used to parse strings (inferred from the
    default when not given: int, float, bool or str; "size" accepts "4GiB"; "seconds" is a float)."""
    if kind is None:
        kind = {bool: "bool", int: "int", float: "float", str: "str"}.get(type(default), "str")
    if kind not in KINDS:
        raise ValueError(f"unknown setting kind {kind!r}")
    return dataclasses.field(default=default, metadata={"doc": doc, "kind": kind, "optional": optional})


@dataclass(frozen=True)
class SettingInfo:
    """One setting as documented: its name in code, its variable, kind, default and doc line."""

    name: str
    variable: str
    kind: str
    default: Any
    doc: str


def coerce(name: str, raw: Any, kind: str, optional: bool = False) -> Any:
    """`raw` (a string from the environment, or a value from code) as a value of `kind`."""
    if raw is None and optional:
        return None
    try:
        if kind == "bool":
            if isinstance(raw, str):
                if raw.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(raw)
                return raw.lower() in ("1", "true", "yes", "on")
            if not isinstance(raw, (bool, int)):
                raise TypeError(raw)
            return bool(raw)
        if kind == "size":
            value = parse_size(raw)
            if value >= 1 << 62:
                raise ValueError(raw)
            return value
        if kind in ("int", "port"):
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise TypeError(raw)
            value = int(raw)
            if kind == "port" and not 0 <= value <= 65535:
                raise ValueError(raw)
            return value
        if kind in ("seconds", "float"):
            if isinstance(raw, bool):
                raise TypeError(raw)
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError(raw)
            return number
        if not isinstance(raw, str):
            raise TypeError(raw)
        return raw
    except (TypeError, ValueError, InvalidArgumentError) as exc:
        shown = "(hidden)" if kind == "secret" else repr(raw)
        raise InvalidArgumentError(f"bad value for {name}: {shown} (expected {_describe(kind)})") from exc


def _describe(kind: str) -> str:
    return {
        "size": "a size such as 4096, 512KiB or 4GiB",
        "seconds": "a number of seconds",
        "bool": "1/0, true/false, yes/no or on/off",
        "port": "a port number 0..65535",
        "int": "an integer",
        "float": "a number",
        "secret": "a string (never printed)",
    }.get(kind, "a string")


T = TypeVar("T", bound="Settings")


class Settings:
    """Base of the config dataclasses: ``load`` builds one from defaults, environment and code."""

    ENV_PREFIX: ClassVar[str] = "KVSTORE_"
    origins: dict[str, Origin]

    @classmethod
    def settings(cls) -> Iterator[SettingInfo]:
        """Every setting this config reads (nested blocks included), for documentation and the check of
        the environment."""
        return cls.field_settings()

    @classmethod
    def field_settings(cls) -> Iterator[SettingInfo]:
        """The settings that are fields of this dataclass, in declaration order."""
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "kind" in f.metadata:
                yield SettingInfo(
                    f.name, cls.ENV_PREFIX + f.name.upper(), f.metadata["kind"], f.default, f.metadata["doc"]
                )

    @classmethod
    def load(cls: type[T], env: Mapping[str, str] | None = None, /, **overrides: Any) -> T:
        """Defaults, then ``<PREFIX>*`` variables of `env` (os.environ if None), then `overrides`."""
        import os

        config = cls()
        config.apply_all(os.environ if env is None else env, overrides)
        config.validate()
        return config

    def apply_all(self, env: Mapping[str, str], overrides: Mapping[str, Any]) -> None:
        """Sets every field from the environment, then from `overrides`; unknown override names fail."""
        object.__setattr__(self, "origins", {})
        fields = {f.name: f for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        for info in self.field_settings():
            self.origins[info.name] = DEFAULT
            if info.variable in env:
                origin = Origin("environment", info.variable)
                self._set(fields[info.name], f"{info.variable} ({info.name})", env[info.variable], origin)
        for name, value in overrides.items():
            if name not in fields or "kind" not in fields[name].metadata:
                raise InvalidArgumentError(f"unknown {type(self).__name__} setting {name!r}")
            self._set(fields[name], name, value, CODE)

    def _set(self, f: dataclasses.Field[Any], label: str, raw: Any, origin: Origin) -> None:
        setattr(self, f.name, coerce(label, raw, f.metadata["kind"], f.metadata.get("optional", False)))
        self.origins[f.name] = origin

    def origin(self, name: str) -> Origin:
        return getattr(self, "origins", {}).get(name, DEFAULT)

    def validate(self) -> None:
        """Checks ranges and relations between fields; raises InvalidArgumentError."""

    def describe(self) -> list[tuple[str, Any, Origin, str]]:
        """(name, value, origin, doc) for every field setting."""
        return [(s.name, getattr(self, s.name), self.origin(s.name), s.doc) for s in self.field_settings()]
