"""Progress bars and tables for the benches, and `kvstore bench` (the README's main job)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kvstore.bench.master_bench import MemoryUse
from kvstore.bench.master_bench import OpRate as MasterRate
from kvstore.bench.store_bench import OpResult, StoreBenchConfig, describe
from kvstore.bench.store_bench import run as run_store
from kvstore.bench.tier_bench import TierBenchConfig, TierBenchResult
from kvstore.bench.tier_bench import run as run_tier
from kvstore.errors import KVStoreError
from transfer_engine.bench import TransferBenchConfig, run_initiator
from transfer_engine.units import format_size

T = TypeVar("T")


def wide_console() -> Console:
    """A console for result tables: the terminal's width, or 120 columns when output is piped."""
    console = Console()
    return console if console.is_terminal else Console(width=120)


def with_progress(work: Callable[[Callable[[str], None]], T], steps: int, title: str = "store bench") -> T:
    """Runs work(advance) under a progress bar of `steps` steps on stderr; where stderr is no terminal (a
    pipe, a CI log: a bar shows nothing there, and a bench ran a minute in silence) a line per step
    instead, flushed as it comes. Results go to stdout either way."""
    if not sys.stderr.isatty():
        began = time.monotonic()
        print(f"{title}: started", file=sys.stderr, flush=True)

        def said(label: str) -> None:
            print(f"{title}: {label} done ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)

        return work(said)
    columns = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(title, total=steps)
        progress.advance(task)

        def advance(label: str) -> None:
            progress.update(task, advance=1, description=f"{title}: {label} done")

        return work(advance)


def store_table(results: list[OpResult], console: Console | None = None) -> None:
    table = Table(title=f"kvstore bench store ({results[0].transport}, {results[0].clients} client(s))")
    for col in (
        "op",
        "value",
        "batch",
        "keys/s",
        "GB/s",
        "p50 µs",
        "p99 µs",
        "baseline GB/s",
        "ratio",
        "errors",
    ):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(*describe(r))
    out = console or wide_console()
    out.print(table)
    kinds = sorted({r.baseline_kind for r in results if r.baseline_kind})
    if kinds:
        out.print(f"Baseline (measured by the client in the same run): {'; '.join(kinds)}.")


def master_table(
    rates: list[MasterRate],
    memory: MemoryUse,
    mooncake: tuple[list[MasterRate], MemoryUse] | None = None,
    console: Console | None = None,
) -> None:
    """kvstore's master rates; with `mooncake`, Mooncake's master beside them (same shape) and the ratio."""
    clients = rates[0].clients if rates else 0
    table = Table(title=f"kvstore bench master ({clients} load process(es), RPC only)")
    theirs = {r.op: r for r in mooncake[0]} if mooncake else {}
    for col in ("op", "keys/s", "p50 µs", "p99 µs", "errors"):
        table.add_column(col, justify="right")
    if mooncake:
        for col in ("Mooncake keys/s", "Mooncake p50 µs", "ratio"):
            table.add_column(col, justify="right")
    for r in rates:
        row = [r.op, f"{r.per_s:,.0f}", f"{r.p50_us:.0f}", f"{r.p99_us:.0f}", str(r.errors)]
        if mooncake:
            other = theirs.get(r.op)
            row += (
                [f"{other.per_s:,.0f}", f"{other.p50_us:.0f}", f"{r.per_s / other.per_s:.2f}x"]
                if other and other.per_s
                else ["-", "-", "-"]
            )
        table.add_row(*row)
    out = console or wide_console()
    out.print(table)
    mine = memory.rss_bytes_per_object
    line = f"master memory: {mine:,.0f} bytes per object ({memory.objects:,} objects)"
    if mooncake:
        line += f"; Mooncake's: {mooncake[1].rss_bytes_per_object:,.0f}"
    out.print(line)
    tasks = ", ".join(f"{task} {ms:.2f}" for task, ms in sorted(memory.task_max_ms.items()))
    out.print(f"master loop held at most: {memory.loop_turn_max_ms:.1f} ms a turn; per task (ms): {tasks}")


def summary(duration: float = 3.0) -> int:
    """Store bench (cross-process, embedded cluster), transfer benches (shm, tcp) and the disk tier's get,
    one table; a progress bar (or, off a terminal, a line per step) on stderr meanwhile."""
    console = wide_console()
    store_cfg = StoreBenchConfig(duration=duration, segment_size=1 << 30)

    def work(advance: Callable[[str], None]) -> tuple[list[OpResult], list[list[str]], str]:
        store = run_store(store_cfg, advance)
        rows = [_store_row(r) for r in store]
        for transport, block in (("shm", 4 << 20), ("tcp", 1 << 20)):
            rows.append(
                _transfer_row(TransferBenchConfig(transport=transport, block_size=block, duration=duration))
            )
            advance(f"transfer {transport}")
        try:
            rows.append(_disk_row(run_tier(TierBenchConfig(total=256 << 20, memory=64 << 20, batch_size=16))))
            disk_note = ""
        except KVStoreError as exc:  # e.g. a working directory on a file system without O_DIRECT
            disk_note = f" Disk tier line skipped: {exc}."
        advance("disk tier")
        return store, rows, disk_note

    store, rows, disk_note = with_progress(work, len(store_cfg.ops) + 5, "kvstore bench")
    table = Table(title="kvstore bench (this machine, embedded default)")
    for col in ("bench", "shape", "GB/s", "ops/s", "p50 µs", "p99 µs", "baseline GB/s", "ratio"):
        table.add_column(col, justify="right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        "store: master + 1 storage node process + 1 client process; transfer: 2 processes. "
        "Baselines: memcpy (shm, and the store's same-host node) / raw TCP stream (tcp) over the same "
        "working set; O_DIRECT reads of the working directory's file system (disk tier). Only successful, "
        "verified items are counted." + disk_note
    )
    failed = [f"{r.op}: {r.errors}" for r in store if r.errors]
    if failed:
        console.print(f"[red]errors (items that failed; not counted above): {', '.join(failed)}[/red]")
    return 0 if not failed else 1


def _rate_columns(
    ops_per_s: float, p50_us: float, p99_us: float, baseline: float | None, ratio: float | None
) -> list[str]:
    """A row's ops/s, p50, p99, baseline and ratio columns ("-" for a baseline or ratio not measured)."""
    return [
        f"{ops_per_s:,.0f}",
        f"{p50_us:.0f}",
        f"{p99_us:.0f}",
        f"{baseline:.2f}" if baseline else "-",
        f"{ratio:.2f}" if ratio else "-",
    ]


def _store_row(r: OpResult) -> list[str]:
    return [
        f"store {r.op}",
        f"{format_size(r.value_size)} x {r.batch_size}" if r.op != "exists" else f"{r.batch_size} keys",
        f"{r.gbps:.2f}" if r.op != "exists" else "-",
        *_rate_columns(r.ops_per_s, r.p50_us, r.p99_us, r.baseline_gbps, r.ratio),
    ]


def _transfer_row(cfg: TransferBenchConfig) -> list[str]:
    t = run_initiator(cfg)
    return [
        f"transfer {t.transport} {t.op}",
        f"{format_size(cfg.block_size)} x {t.batch_size}",
        f"{t.gbps:.2f}",
        *_rate_columns(t.ops_per_s, t.p50_us, t.p99_us, t.baseline_gbps, t.ratio),
    ]


def _disk_row(d: TierBenchResult) -> list[str]:
    return [
        f"disk tier get ({d.backend})",
        f"{format_size(d.value_size)} x {d.batch_size}",
        f"{d.get_gbps:.2f}",
        f"{d.get_gbps * 1e9 / d.value_size:,.0f}",
        f"{d.get_p50_ms * 1e3:.0f}",
        f"{d.get_p99_ms * 1e3:.0f}",
        f"{d.baseline_read_gbps:.2f}",
        f"{d.get_ratio:.2f}",
    ]
