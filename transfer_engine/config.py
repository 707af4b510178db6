"""Typed engine configuration.

Precedence, highest first: arguments given in code, then ``KVSTORE_*`` environment variables, then the
defaults below (see transfer_engine.settings). Sizes accept ``"4GiB"``-style strings, durations are
seconds.

Each transport owns its block of settings, declared next to its code in C++ (csrc/transport/<name>/)
and learned here from the registration list: ``tcp_connections=4`` in code or
``KVSTORE_TCP_CONNECTIONS=4`` in the environment set the tcp transport's ``connections``. Every
transport has ``enabled`` (``KVSTORE_SHM_ENABLED=0`` turns shared memory off).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from transfer_engine.errors import InvalidArgumentError
from transfer_engine.settings import CODE, DEFAULT, Origin, SettingInfo, Settings, coerce, setting
from transfer_engine.topology import NicSelection


@dataclass(frozen=True)
class TransportSpec:
    """A registered transport as the C++ registration list describes it."""

    name: str
    cost: int
    reach: tuple[str, ...]
    local_kinds: tuple[str, ...]
    remote_kinds: tuple[str, ...]
    options: tuple[dict[str, Any], ...]
    # Peers reach memory without the target's checks (UCX RMA): no allocation fences, and an unregistered
    # region is refused only to peers that refresh their view of it (RDMA deregisters it at once).
    one_sided: bool = False


@cache
def transport_specs() -> tuple[TransportSpec, ...]:
    """The registered transports, in registration order (csrc/transport/transports.def)."""
    from transfer_engine import _core  # (the data-plane extension, loaded only when asked)

    return tuple(
        TransportSpec(
            t["name"],
            t["cost"],
            tuple(t["reach"]),
            tuple(t["local_kinds"]),
            tuple(t["remote_kinds"]),
            tuple(t["options"]),
            bool(t["one_sided"]),
        )
        for t in _core.transports()
    )


def transport_names() -> tuple[str, ...]:
    return tuple(t.name for t in transport_specs())


def transport_choices() -> tuple[str, ...]:
    """What a `transport` setting may say: auto or a registered transport."""
    return ("auto", *transport_names())


_KIND = {"duration_ms": "seconds", "size": "size", "bool": "bool", "int": "int"}


class TransportSettings:
    """The settings block of one transport: values by name, with where each came from."""

    def __init__(self, spec: TransportSpec) -> None:
        self.spec = spec
        self.values: dict[str, Any] = {o["name"]: self._from_native(o, o["default"]) for o in spec.options}
        self.origins: dict[str, Origin] = {o["name"]: DEFAULT for o in spec.options}

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def settings(self) -> Iterator[SettingInfo]:
        """One per option, named "<transport>_<option>" in code and KVSTORE_<TRANSPORT>_<OPTION>."""
        for o in self.spec.options:
            name = f"{self.spec.name}_{o['name']}"
            default = self._from_native(o, o["default"])
            yield SettingInfo(name, f"KVSTORE_{name.upper()}", _KIND[o["kind"]], default, o["doc"])

    def set(self, option: str, raw: Any, label: str, origin: Origin) -> None:
        o = next(o for o in self.spec.options if o["name"] == option)
        value = coerce(label, raw, _KIND[o["kind"]])
        native = self._native(o, value)
        if not o["min"] <= native <= o["max"]:
            low, high = self._from_native(o, o["min"]), self._from_native(o, o["max"])
            raise InvalidArgumentError(f"{label} must be in [{low}, {high}], got {raw!r}")
        self.values[option] = value
        self.origins[option] = origin

    @staticmethod
    def _native(o: dict[str, Any], value: Any) -> int:
        """The value as the C++ core takes it (durations in ms)."""
        return round(value * 1000) if o["kind"] == "duration_ms" else int(value)

    @staticmethod
    def _from_native(o: dict[str, Any], value: int) -> Any:
        """A value as the C++ core states it, in Python's terms (seconds, bools)."""
        if o["kind"] == "duration_ms":
            return value / 1000
        return bool(value) if o["kind"] == "bool" else value

    def to_core(self) -> dict[str, int]:
        return {o["name"]: self._native(o, self.values[o["name"]]) for o in self.spec.options}


@dataclass
class EngineConfig(Settings):
    """A transfer engine: where it serves and how it moves data."""

    host: str = setting("127.0.0.1", 'Address to serve on; with the port it names this engine ("host:port").')
    port: int = setting(0, "Handshake port peers connect to first; 0 picks a free one.", "port")
    transport: str = setting(
        "auto", "Transport for every peer: auto (the cheapest that reaches it) or one registered transport."
    )
    copy_threads: int = setting(
        2,
        "Worker threads for memory-to-memory copies (local and shm transports); at most one fewer than the "
        "cores the process may use start, since a caller waiting on its batch copies too.",
    )
    transfer_timeout: float = setting(
        30.0, "Default deadline of a batch; then unfinished requests TIME OUT.", "seconds"
    )
    handshake_timeout: float = setting(5.0, "How long opening a peer may take.", "seconds")
    peer_pin_timeout: float = setting(
        5.0, "How long unregistering a region waits for same-host peers' copies to finish.", "seconds"
    )
    nics: str = setting(
        "",
        "NICs this engine may use and advertises to peers: net devices, RDMA devices or PCI addresses, "
        "comma-separated (only those), or the same after ^ (all but those); empty: every NIC with a PCI "
        "device. `kvstore topology` shows the choice.",
    )
    sysfs_root: str = setting(
        "/sys", "Where this host's sysfs is read (NICs, GPUs, NUMA nodes); tests point it at fake trees."
    )
    ucx_library: str = setting(
        "",
        "The libucp the ucx transport loads (a system UCX with verbs on an RDMA host); empty: the libucx "
        "wheel's (the ucx extra), else the dynamic linker's. One per process.",
    )
    # Each registered transport's settings block, built on first use (`transports`): listing the transports
    # loads the engine's extension, which a process that only checks its environment (a master) never needs.
    _transports: dict[str, TransportSettings] | None = field(default=None, repr=False, compare=False)

    @property
    def transports(self) -> dict[str, TransportSettings]:
        if self._transports is None:
            self._transports = {spec.name: TransportSettings(spec) for spec in transport_specs()}
        return self._transports

    def transport_settings(self, name: str) -> TransportSettings:
        if name not in self.transports:
            raise InvalidArgumentError(
                f"unknown transport {name!r} (registered: {', '.join(self.transports)})"
            )
        return self.transports[name]

    @classmethod
    def settings(cls) -> Iterator[SettingInfo]:
        yield from super().settings()
        for spec in transport_specs():
            yield from TransportSettings(spec).settings()

    def apply_all(self, env: Mapping[str, str], overrides: Mapping[str, Any]) -> None:
        own_names = {i.variable for i in self.field_settings()}
        if not overrides and all(n in own_names for n in env if n.startswith(self.ENV_PREFIX)):
            super().apply_all(env, {})  # (no transport option named: the blocks stay unbuilt, at defaults)
            return
        own = {k: v for k, v in overrides.items() if self._transport_option(k) is None}
        super().apply_all(env, own)
        for block in self.transports.values():
            for o, info in zip(block.spec.options, block.settings(), strict=True):
                if info.variable in env:
                    label = f"{info.variable} ({info.name})"
                    block.set(o["name"], env[info.variable], label, Origin("environment", info.variable))
        for name, value in overrides.items():
            target = self._transport_option(name)
            if target is not None:
                self.transports[target[0]].set(target[1], value, name, CODE)

    def _transport_option(self, name: str) -> tuple[str, str] | None:
        """("tcp", "connections") for "tcp_connections"; None when `name` is no transport setting."""
        for spec in transport_specs():
            prefix = spec.name + "_"
            if name.startswith(prefix) and any(o["name"] == name[len(prefix) :] for o in spec.options):
                return spec.name, name[len(prefix) :]
        return None

    def origin(self, name: str) -> Origin:
        target = self._transport_option(name)
        if target is not None:
            return self.transports[target[0]].origins[target[1]]
        return super().origin(name)

    def describe(self) -> list[tuple[str, Any, Origin, str]]:
        rows = super().describe()
        for block in self.transports.values():
            for info in block.settings():
                option = info.name[len(block.spec.name) + 1 :]
                rows.append((info.name, block.values[option], block.origins[option], info.doc))
        return rows

    def validate(self) -> None:
        if self.transport != "auto" and self.transport not in transport_choices():
            raise InvalidArgumentError(
                f"transport must be one of {', '.join(transport_choices())}, got {self.transport!r}"
            )
        if self.transport != "auto" and not self.transports[self.transport]["enabled"]:
            raise InvalidArgumentError(f"transport {self.transport!r} is chosen but disabled")
        NicSelection.parse(self.nics)
        if not 1 <= self.copy_threads <= 64:
            raise InvalidArgumentError(f"copy_threads must be 1..64, got {self.copy_threads}")
        for name in ("transfer_timeout", "handshake_timeout", "peer_pin_timeout"):
            if not 0 < getattr(self, name) <= 86400:
                raise InvalidArgumentError(f"{name} must be positive (seconds, at most a day)")

    def to_core(self) -> dict[str, Any]:
        """Keyword arguments of the C++ engine."""
        selection = NicSelection.parse(self.nics)
        return {
            "host": self.host,
            "port": self.port,
            "transport": self.transport,
            "copy_threads": self.copy_threads,
            "handshake_timeout_ms": round(self.handshake_timeout * 1000),
            "peer_pin_timeout_ms": round(self.peer_pin_timeout * 1000),
            "transport_options": {name: block.to_core() for name, block in self.transports.items()},
            "nics": list(selection.names),
            "nics_exclude": selection.exclude,
            "sysfs_root": self.sysfs_root,
        }
