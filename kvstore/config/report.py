"""`kvstore config`: the effective settings of every component, and where each value came from."""

from __future__ import annotations

import json
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
    from rich.console import Console
    from rich.table import Table

    if variables:
        known = known_variables()
        if as_json:
            print(json.dumps(known))
            return 0
        table = Table(title="KVSTORE_* variables")
        table.add_column("variable")
        table.add_column("sets")
        for name in sorted(known):
            table.add_row(name, known[name])
        Console().print(table)
        return 0
    names = [component] if component else list(COMPONENTS)
    report = {name: effective(name) for name in names}
    if as_json:
        print(json.dumps(report, default=str))
        return 0
    console = Console()
    for name, rows in report.items():
        table = Table(title=f"{name} settings (code > environment > default)")
        for col in ("setting", "value", "source", "variable"):
            table.add_column(col)
        for row in rows:
            table.add_row(row["setting"], _show(row["value"], row["setting"]), row["source"], row["variable"])
        console.print(table)
    return 0
