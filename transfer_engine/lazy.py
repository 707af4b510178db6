"""Names a package imports on first use (PEP 562): importing the package loads only what is asked for (a
master that needs the errors never loads the engine's extension)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: each name of `where` is imported from its module on first
    use, then kept in the package (looked up once)."""

    def lookup(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return lookup
