"""The `kvstore` command's options that more than one (sub)command takes, each declared once: its name, type,
action and usual help. A command adds it as it is, or with what differs there (`.but(default=...)`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kvstore import cli_args as arg
from transfer_engine.settings import SettingInfo, Settings
from transfer_engine.units import format_size


@dataclass(frozen=True)
class Flag:
    """One option: its name and argparse keywords (type, action, choices, default, help)."""

    name: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def dest(self) -> str:
        """The namespace attribute it sets (argparse's rule: --disk-size is disk_size)."""
        return str(self.options.get("dest", self.name.lstrip("-").replace("-", "_")))

    def but(self, **changes: Any) -> Flag:
        """The same option with some keywords changed (this command's default or help)."""
        return Flag(self.name, MappingProxyType({**self.options, **changes}))

    def add(self, parser: argparse.ArgumentParser | argparse._ActionsContainer) -> None:
        parser.add_argument(self.name, **self.options)


def flag(name: str, **options: Any) -> Flag:
    return Flag(name, MappingProxyType(options))


def from_setting(config: type[Settings], name: str, **options: Any) -> Flag:
    """The option that sets `config`'s setting `name` (--client-ttl sets client_ttl): its help is the
    setting's own doc line, variable and default, so the option and the setting never say different things.
    `options` are its argparse keywords (type, action, help to put before the doc line as `lead`)."""
    info = next((s for s in config.field_settings() if s.name == name), None)
    if info is None:
        raise ValueError(f"{config.__name__} has no setting {name!r}")
    lead = options.pop("lead", "")
    text = f"{lead}{' ' if lead else ''}{info.doc.rstrip('.')} ({info.variable}{_default(info)})"
    return Flag(f"--{name.replace('_', '-')}", MappingProxyType({**options, "help": text.replace("%", "%%")}))


def _default(info: SettingInfo) -> str:
    if info.default is None or info.default == "":
        return ""
    if info.kind == "size":
        return f"; default {format_size(info.default)}"
    if info.kind == "bool":
        return f"; default {'on' if info.default else 'off'}"
    return f"; default {info.default:g}" if isinstance(info.default, float) else f"; default {info.default}"


def add_flags(parser: argparse.ArgumentParser | argparse._ActionsContainer, *flags: Flag) -> None:
    """Adds the flags in order (the order --help lists them in)."""
    for each in flags:
        each.add(parser)


def dests(flags: tuple[Flag, ...]) -> list[str]:
    """The namespace attributes a run of flags sets (to pass on what was given: the settings' names)."""
    return [f.dest for f in flags]


def shard_host_ports(text: str) -> str:
    """HOST:PORT[,HOST:PORT...] of a master (or of one's leader and standbys), or of each shard of a
    cluster split over shards, ';'-separated in shard order (kvstore.cluster.shards)."""
    return ";".join(arg.host_ports(part) for part in text.split(";"))


JSON = flag("--json", action="store_true", help="print JSON for scripts")
MASTERS = flag(
    "--master",
    type=shard_host_ports,
    help="HOST:PORT of the master, or of a cluster's masters comma-separated; the shards of a cluster "
    "split over shards ';'-separated in shard order, e.g. 'h:1,h:2;h:3,h:4' (default: KVSTORE_MASTER)",
)
TRANSPORT = flag(
    "--transport", type=arg.transport, help="auto or a transport; default: KVSTORE_TRANSPORT, else auto"
)
INSECURE = flag(
    "--insecure",
    action="store_true",
    help="listen beyond loopback with no cluster secret (KVSTORE_INSECURE=1): anyone may use it",
)
HOST = flag("--host")
PORT = flag("--port", type=arg.port)
ETCD = flag("--etcd", type=arg.host_ports)
CLUSTER = flag("--cluster")
DISK_BACKEND = flag("--disk-backend", choices=["auto", "io_uring", "threads"])
HEAT_HALF_LIFE = flag("--heat-half-life", type=arg.positive_float)
NICS = flag("--nics")
GPU = flag("--gpu", action="store_true")
PLOT = flag("--plot")
LIMIT = flag("--limit", type=arg.positive_int)

ETCD_ACCESS = {
    "ca": "PEM CA of etcd: speak TLS to it (KVSTORE_ETCD_CA)",
    "cert": "PEM client certificate for etcd, with --etcd-key (KVSTORE_ETCD_CERT)",
    "key": "its private key, owner-only (KVSTORE_ETCD_KEY)",
    "user": "etcd user to log in as, with --etcd-password-file (KVSTORE_ETCD_USER)",
    "password_file": "file holding that user's password, owner-only (KVSTORE_ETCD_PASSWORD_FILE)",
}
ETCD_ACCESS_FLAGS = tuple(
    flag(f"--etcd-{name.replace('_', '-')}", dest=f"etcd_{name}", help=what)
    for name, what in ETCD_ACCESS.items()
)

# The benches' shared shapes: sizes, counts and the cluster they start or join.
VALUE_SIZE = flag("--value-size", type=arg.size, help="bytes of each value (e.g. 512KiB)")
BATCH_SIZE = flag("--batch-size", type=arg.positive_int, help="items per batch call")
DURATION = flag("--duration", type=arg.positive_float)
CLIENTS = flag("--clients", type=arg.positive_int, default=1)
OPS = flag("--ops", default="put,get,exists")
MOONCAKE = flag("--mooncake", metavar="PYTHON")
BENCH_MASTER = flag("--master", type=arg.host_port, help="a running master (default: start a cluster here)")
BENCH_SEGMENT = flag("--segment-size", type=arg.size, default=2 << 30, help="storage node segment")
LOAD_MODE = flag(  # a bench's own load processes run it again in client mode
    "--mode", choices=["orchestrator", "client"], default="orchestrator", help=argparse.SUPPRESS
)
