"""The client package stays a house a newcomer can work in (issue 41): Store a facade under 500 lines over
the read and write sides, no file of kvstore/client over 600, and every kvstore.client name its text
points a reader to exists (read_plan's doc named a Store._read_general long gone)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import kvstore.client

CLIENT = Path(kvstore.client.__file__).parent
NAMED = re.compile(r"\bkvstore\.client(?:\.\w+)+")


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_store_is_a_facade_and_no_client_file_is_long() -> None:
    assert lines(CLIENT / "store.py") < 500
    long = {path.name: lines(path) for path in CLIENT.glob("*.py") if lines(path) > 600}
    assert not long


def resolves(dotted: str) -> bool:
    """Whether kvstore.client.<module>[.<attribute>...] names a module and attributes that exist."""
    parts = dotted.split(".")
    for split in range(len(parts), 1, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_client_name_in_the_clients_text_exists() -> None:
    named = {
        (path.name, dotted.rstrip("."))
        for path in CLIENT.glob("*.py")
        for dotted in NAMED.findall(path.read_text())
    }
    assert named  # (the package does point readers to its parts)
    assert [(file, dotted) for file, dotted in sorted(named) if not resolves(dotted)] == []
