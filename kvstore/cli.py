"""The `kvstore` command: master, node, index, status, config, topology, secret, and bench (its benches:
kvstore.bench.cli).

Options left out on the command line come from KVSTORE_* variables, then the defaults (`kvstore config`
shows the effective settings and where each came from).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvstore import cli_args as arg
from kvstore import cli_flags as flags
from kvstore import log_lines
from kvstore.bench.cli import Runner, add_bench_commands
from kvstore.cli_flags import Flag, add_flags, flag, from_setting
from kvstore.config import IndexConfig, MasterConfig, NodeConfig
from kvstore.config.master import EVICTION_POLICIES
from kvstore.rpc.etcd import MAX_SHARDS
from transfer_engine.errors import AddressInUseError, HostNotUsableError, InvalidArgumentError, KVStoreError


def _master(name: str, **options: Any) -> Flag:
    return from_setting(MasterConfig, name, **options)


_MASTER_SETTINGS = (
    _master("host"),
    _master("advertise_host"),
    _master("port", type=arg.port),
    _master("http_port", type=arg.port),
    _master("eviction_policy", choices=EVICTION_POLICIES),
    _master("client_ttl", type=arg.positive_float),
    _master("heartbeat_interval", type=arg.positive_float),
    _master("lease_ttl", type=arg.positive_float),
    _master("put_timeout", type=arg.positive_float),
    _master("high_watermark", type=arg.positive_float),
    _master("low_watermark", type=arg.positive_float),
    _master("hot_access_rate", type=arg.positive_float),
    _master("cool_access_rate", type=arg.positive_float),
    _master("heat_half_life", type=arg.positive_float),
    _master("etcd", type=arg.host_ports),
    _master("cluster"),
    _master("leader_ttl", type=int),
    _master("shard", type=arg.number(int, 0, MAX_SHARDS - 1, f"a shard number (0..{MAX_SHARDS - 1})")),
    _master("shards", type=arg.number(int, 1, MAX_SHARDS, f"a shard count (1..{MAX_SHARDS})")),
)
_MASTER_SERVICES = (
    _master("kv_events_endpoint"),
    _master("kv_events_tcp", action="store_true", default=None),
    _master("admin_secret_file"),
)
# The MasterConfig fields the master's options set (etcd access and --insecure travel as variables).
_MASTER_FLAGS = flags.dests(_MASTER_SETTINGS + _MASTER_SERVICES)


def _add_master(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("master", help="run the metadata master (until SIGTERM/SIGINT)")
    add_flags(
        p,
        *_MASTER_SETTINGS,
        *flags.ETCD_ACCESS_FLAGS,
        *_MASTER_SERVICES,
        flags.INSECURE,
    )


def _apply_etcd_access(args: argparse.Namespace) -> None:
    """etcd's TLS and login given as options become KVSTORE_ETCD_* (read wherever etcd is reached)."""
    for name in flags.ETCD_ACCESS:
        value = getattr(args, f"etcd_{name}", None)
        if value is not None:
            os.environ[f"KVSTORE_ETCD_{name.upper()}"] = value


def _apply_insecure(args: argparse.Namespace) -> None:
    if args.insecure:  # (the variable, so that the processes this one starts are told too)
        os.environ["KVSTORE_INSECURE"] = "1"


def _given(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The options given on the command line (the others fall through to KVSTORE_* and defaults)."""
    return {k: getattr(args, k) for k in names if getattr(args, k) is not None}


def _run_master(args: argparse.Namespace) -> int:
    from kvstore.master.wire.process import run_master

    log_lines.configure("master")
    _apply_insecure(args)
    _apply_etcd_access(args)
    config = MasterConfig.load(**_given(args, _MASTER_FLAGS))
    try:
        run_master(config)
    except AddressInUseError as exc:
        ports = {
            config.port: "--port (KVSTORE_MASTER_PORT)",
            config.http_port: "--http-port (KVSTORE_MASTER_HTTP_PORT)",
        }
        raise _naming(exc, ports) from None
    except HostNotUsableError as exc:
        raise exc.naming("--host (KVSTORE_MASTER_HOST)") from None
    return 0


def _naming(exc: AddressInUseError, settings: dict[int | None, str]) -> AddressInUseError:
    """`exc` saying which option set the port it could not listen on (`settings`: port -> option)."""
    return exc.naming(settings[exc.port]) if not exc.setting and exc.port in settings else exc


_INDEX_SETTINGS = tuple(
    from_setting(IndexConfig, name, type=kind)
    for name, kind in (
        ("host", str),
        ("port", arg.port),
        ("hash_seed", arg.hash_seed),
        ("max_blocks", arg.positive_int),
    )
)


def _add_index(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "index", help="the cache-aware routing index: Mooncake Conductor's HTTP API fed by KV events"
    )
    add_flags(p, *_INDEX_SETTINGS, flags.INSECURE)


def _run_index(args: argparse.Namespace) -> int:
    from kvstore.index.process import run_index

    log_lines.configure("index")
    _apply_insecure(args)
    config = IndexConfig.load(**_given(args, flags.dests(_INDEX_SETTINGS)))
    try:
        run_index(config)
    except AddressInUseError as exc:
        raise _naming(exc, {config.port: "--port (KVSTORE_INDEX_PORT)"}) from None
    except HostNotUsableError as exc:
        raise exc.naming("--host (KVSTORE_INDEX_HOST)") from None
    return 0


_MASTER_CHOICE = (
    flags.MASTERS,
    flags.ETCD.but(help="HOST:PORT[,...] of etcd, to follow the leader of --cluster (KVSTORE_ETCD)"),
    flags.CLUSTER.but(help="the cluster whose leader etcd names (KVSTORE_CLUSTER; default: default)"),
    *flags.ETCD_ACCESS_FLAGS,
)


def _node(name: str, **options: Any) -> Flag:
    return from_setting(NodeConfig, name, **options)


def _add_node(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("node", help="contribute a memory segment to the pool (until SIGTERM/SIGINT)")
    add_flags(
        p,
        *_MASTER_CHOICE,
        _node("segment_size", type=arg.size),
        _node("pinned", action="store_const", const=True),
        _node("disk"),
        _node("disk_size", type=arg.size),
        _node("disk_backend", choices=["auto", "io_uring", "threads"]),
        flags.HOST.but(
            help="address this node's transfer engine serves on (KVSTORE_HOST; default 127.0.0.1)"
        ),
        flags.TRANSPORT,
        _node("name"),
        _node("memory_dir"),
        flags.INSECURE,
    )


def _run_node(args: argparse.Namespace) -> int:
    from kvstore.node.process import run_node

    # Warnings on stderr, and what the node itself says as it starts (how far its memory is ready).
    log_lines.configure("node", info=["kvstore.node"])
    _apply_insecure(args)
    _apply_etcd_access(args)
    settings = ["name", "segment_size", "pinned", "disk", "disk_size", "disk_backend", "memory_dir"]
    try:
        run_node(
            NodeConfig.load(**_given(args, settings)),
            **_given(args, ["master", "etcd", "cluster", "host", "transport"]),
        )
    except HostNotUsableError as exc:
        raise exc.naming("--host (KVSTORE_HOST)") from None
    return 0


def _add_status(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "status",
        help="the cluster as its master sees it: nodes, tiers, usage, rates",
        description="Without --master or --etcd it asks KVSTORE_MASTER, else KVSTORE_ETCD (and "
        "KVSTORE_CLUSTER), else this host's master's KVSTORE_MASTER_ETCD (and KVSTORE_MASTER_CLUSTER), else "
        "the local master: KVSTORE_MASTER_HOST (else 127.0.0.1) at KVSTORE_MASTER_PORT (else 50051); it says "
        "on stderr which.",
    )
    add_flags(
        p,
        *_MASTER_CHOICE,
        flags.JSON.but(help="one JSON object, for scripts"),
        flag("--timeout", type=arg.positive_float, default=5.0, help="seconds to wait for the master"),
    )


def _run_status(args: argparse.Namespace) -> int:
    from kvstore.cli_status import status_target
    from kvstore.client.status import fetch_shards, fetch_status, print_shards, print_status
    from kvstore.cluster.leader import locator
    from kvstore.cluster.shards import shard_configs

    _apply_etcd_access(args)
    target = status_target(args.master, args.etcd, args.cluster)
    config = target.config
    if target.source is not None:  # (stderr: --json's stdout stays one object)
        print(f"kvstore status: asking {target.source}", file=sys.stderr, flush=True)
    shards = shard_configs(config)
    if len(shards) > 1:  # a cluster split over shards: each shard's master says its part
        places = [locator(c.master, c.etcd, c.cluster, args.timeout) for c in shards]
        statuses = fetch_shards(list(places), args.timeout)
        print_shards(statuses, args.json)
        return 1 if any("error" in status for status in statuses) else 0
    where = locator(config.master, config.etcd, config.cluster, args.timeout)
    print_status(fetch_status(where, args.timeout), args.json)
    return 0


def _add_config(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("config", help="print the effective settings and where each came from")
    p.add_argument(
        "--component",
        choices=["engine", "client", "node", "master", "security", "index", "etcd"],
        help="default: all",
    )
    p.add_argument("--variables", action="store_true", help="list every KVSTORE_* variable and what it sets")
    flags.JSON.but(help="one JSON object").add(p)


def _run_config(args: argparse.Namespace) -> int:
    from kvstore.config.report import print_config

    return print_config(args.component, args.variables, args.json)


def _add_topology(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "topology", help="this host's NICs, GPUs and NUMA nodes, and the NICs per location"
    )
    add_flags(
        p,
        flag("--sysfs-root", help="read this sysfs tree (default: KVSTORE_SYSFS_ROOT, else /sys)"),
        flags.NICS.but(help="NICs to use, as KVSTORE_NICS (default: that variable)"),
        flags.JSON.but(help="one JSON object keyed by location"),
    )


def _run_topology(args: argparse.Namespace) -> int:
    from transfer_engine import EngineConfig
    from transfer_engine.topology import discover
    from transfer_engine.topology_report import print_topology

    config = EngineConfig.load()
    root = args.sysfs_root or config.sysfs_root
    if not os.path.isdir(root):
        raise InvalidArgumentError(f"sysfs root {root!r} is not a directory")
    print_topology(discover(root, args.nics if args.nics is not None else config.nics), args.json)
    return 0


def _add_secret(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("secret", help="make a cluster secret: `kvstore secret new PATH`")
    p.add_argument("action", choices=["new"], help="new: write a fresh random secret to PATH (mode 0600)")
    p.add_argument("path", help="the file to write (KVSTORE_CLUSTER_SECRET_FILE names it to every process)")
    p.add_argument("--force", action="store_true", help="replace the file if it exists")


def _run_secret(args: argparse.Namespace) -> int:

    from kvstore.config.secret_file import made_directory, new_secret_file

    path = Path(args.path).absolute()
    made = made_directory(path)
    if made is not None:
        print(f"made the directory {made} (mode 0700)")
    new_secret_file(path, overwrite=args.force)
    print(f"wrote a new cluster secret to {path}; give it to every master, node and client:")
    print(f"  export KVSTORE_CLUSTER_SECRET_FILE={path}")
    return 0


def _version() -> str:
    from kvstore import __version__
    from kvstore.rpc.session_requests import PROTOCOL_VERSION

    return f"kvstore {__version__} (wire protocol {PROTOCOL_VERSION}, Python {sys.version.split()[0]})"


def build_parser() -> tuple[argparse.ArgumentParser, dict[tuple[str, str | None], Runner]]:
    """The parser, and the runner of each (command, bench) it parses."""
    parser = argparse.ArgumentParser(
        prog="kvstore", description="Distributed KV-cache store for LLM inference"
    )
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    benches = add_bench_commands(commands)
    _add_master(commands)
    _add_node(commands)
    _add_index(commands)
    _add_status(commands)
    _add_config(commands)
    _add_topology(commands)
    _add_secret(commands)
    runners: dict[tuple[str, str | None], Runner] = {
        **{("bench", name): run for name, run in benches.items()},
        ("master", None): _run_master,
        ("node", None): _run_node,
        ("index", None): _run_index,
        ("status", None): _run_status,
        ("config", None): _run_config,
        ("topology", None): _run_topology,
        ("secret", None): _run_secret,
    }
    return parser, runners


def main(argv: Sequence[str] | None = None) -> int:
    parser, runners = build_parser()
    args = parser.parse_args(argv)
    runner = runners.get((args.command, getattr(args, "bench", None)))
    try:
        if runner is not None:
            return runner(args)
    except KVStoreError as exc:
        print(f"kvstore: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`kvstore bench master --json | head -3`): quietly,
        # with stdout pointed at /dev/null so the interpreter's last flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    parser.error("unknown command")
    return 2


if __name__ == "__main__":
    sys.exit(main())
