"""The `kvstore` command. Subcommands: bench (transfer; store and trace come later)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from transfer_engine.errors import KVStoreError
from transfer_engine.units import parse_size


def _size(text: str) -> int:
    try:
        value = parse_size(text)
    except KVStoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive")
    return value


def _number(kind: type, low: float, high: float, what: str) -> Callable[[str], Any]:
    """An argparse type: parses `kind` and checks low <= value <= high (NaN fails)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from exc
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} out of range: {text}")
        return value

    return parse


_positive_int = _number(int, 1, 2**31, "a positive integer")
_positive_float = _number(float, 1e-9, 1e9, "a positive number")
_port = _number(int, 0, 65535, "a port (0..65535)")


def _host_port(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    _port(port)
    return text


def _add_transfer_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("transfer", help="transfer engine bandwidth and latency vs the machine baseline")
    p.add_argument("--protocol", choices=["tcp", "shm", "local", "auto"], default="auto")
    p.add_argument("--op", choices=["read", "write"], default="read")
    p.add_argument("--block-size", type=_size, default=1 << 20, help="bytes per request (e.g. 1MiB)")
    p.add_argument("--batch-size", type=_positive_int, default=16)
    p.add_argument("--threads", type=_positive_int, default=1)
    p.add_argument("--connections", type=_positive_int, default=2, help="TCP connections per peer")
    p.add_argument("--duration", type=_positive_float, default=5.0, help="seconds measured")
    p.add_argument("--working-set", type=_size, default=512 << 20, help="bytes cycled on each side")
    p.add_argument("--mode", choices=["initiator", "target"], default="initiator")
    p.add_argument("--peer", type=_host_port, help="target segment HOST:PORT (default: start one here)")
    p.add_argument("--host", default="127.0.0.1", help="address this side listens on")
    p.add_argument("--port", type=_port, default=0, help="target mode: port to listen on")
    p.add_argument("--no-baseline", action="store_true", help="skip the baseline measurement")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")


def _run_transfer_bench(args: argparse.Namespace) -> int:
    from transfer_engine import bench

    cfg = bench.TransferBenchConfig(
        protocol=args.protocol,
        op=args.op,
        block_size=args.block_size,
        batch_size=args.batch_size,
        threads=args.threads,
        connections=args.connections,
        duration=args.duration,
        working_set=args.working_set,
        peer=args.peer,
        host=args.host,
        baseline=not args.no_baseline,
    )
    return bench.main(cfg, args.mode, args.port, args.json)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvstore", description="Distributed KV-cache store for LLM inference"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="benchmarks")
    benches = bench.add_subparsers(dest="bench", required=True)
    _add_transfer_bench(benches)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "bench" and args.bench == "transfer":
            return _run_transfer_bench(args)
    except KVStoreError as exc:
        print(f"kvstore: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    parser.error("unknown command")
    return 2


if __name__ == "__main__":
    sys.exit(main())
