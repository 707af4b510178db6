"""`kvstore config`: the effective settings of every component, and where each value came from."""

from __future__ import annotations

import json
import sys
from typing import Any

from kvstore.config import COMPONENTS, StoreConfig, known_variables
from transfer_engine.units import format_size


def effective(component: str) -> list[dict[str, Any]]:
    """Rows of (setting, value, source, variable, doc) for one component, loaded from the environment."""
    config = COMPONENTS[component].load()
    variables = {s.name: s.variable for s in COMPONENTS[component].settings()}
    if isinstance(config, StoreConfig):  # its engine block is shown as the engine component
        rows = [
            (s.name, getattr(config, s.name), config.origin(s.name), s.doc) for s in config.field_settings()
        ]
    else:
        rows = config.describe()
    secret = {s.name for s in COMPONENTS[component].settings() if s.kind == "secret"}
    return [
        {
            "setting": name,
            "value": "(set)" if name in secret and value else value,
            "source": str(origin),
            "variable": variables.get(name, ""),
            "doc": doc,
        }
        for name, value, origin, doc in rows
    ]


def _show(value: Any, name: str) -> str:
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and name.endswith(("size", "buffer", "payload"))
    ):
        return format_size(value)
    return "-" if value is None or value == "" else str(value)


def print_config(component: str | None, variables: bool, as_json: bool) -> int:
    if variables:
        known = known_variables()
        if as_json:
            print(json.dumps(known))
            return 0
        _print_table("KVSTORE_* variables", ("variable", "sets"), [(n, known[n]) for n in sorted(known)])
        return 0
    names = [component] if component else list(COMPONENTS)
    report = {name: effective(name) for name in names}
    if as_json:
        print(json.dumps(report, default=str))
        return 0
    for name, rows in report.items():
        _print_table(
            f"{name} settings (code > environment > default)",
            ("setting", "value", "source", "variable"),
            [(r["setting"], _show(r["value"], r["setting"]), r["source"], r["variable"]) for r in rows],
        )
    return 0


def _print_table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A boxed table on a terminal; elsewhere (a pipe, a file) plain aligned columns of whole values,
    which a terminal's table would cut at its width (80 columns when it has none)."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max(len(str(c)) for c in column) for column in zip(columns, *rows, strict=True)]
    print(f"# {title}")
    for row in (columns, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print()
