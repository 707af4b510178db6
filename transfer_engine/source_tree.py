"""A package imported from its source tree, which has no compiled extensions (a Python started in the root
of a clone that was installed with `pip install .`: the working directory comes first on sys.path, so the
clone's kvstore/ shadows the installed one). Importing an extension there failed with "No module named
'kvstore._meta'", which reads like a broken install; this says what happened and what to do instead."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType


class _UnbuiltExtensions(importlib.abc.MetaPathFinder):
    """Refuses, with the reason, the extensions of `package` (the `_name`s with a `_name.pyi` stub
    beside them) that its source directory has no compiled file of."""

    def __init__(self, package: str, directory: str, missing: frozenset[str]) -> None:
        self.package, self.directory, self.missing = package, directory, missing

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != self.package or name not in self.missing:
            return None
        raise ImportError(  # (not ModuleNotFoundError: `from pkg import _x` would swallow that one)
            f"No module named {fullname!r}: {self.package} was imported from its source tree "
            f"({self.directory}), which has no compiled extensions; run Python from outside the checkout "
            "to use the installed package, or install the checkout editable (pip install -e .)",
            name=fullname,
        )


def refuse_unbuilt_extensions(module: ModuleType) -> None:
    """Called by a package's __init__: when it was loaded straight from a directory on sys.path (not
    through an installer's finder, which knows where its build put the extensions) and that directory
    lacks a compiled extension its stubs name, importing that extension raises the reason, not a bare
    'No module named'. Costs one directory listing, only in that case."""
    spec = module.__spec__
    if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader or not module.__file__:
        return
    directory = os.path.dirname(module.__file__)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    built = {n.split(".", 1)[0] for n in names if n.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))}
    stubs = {n[: -len(".pyi")] for n in names if n.startswith("_") and n.endswith(".pyi")}
    missing = frozenset(stubs - built)
    if missing:
        sys.meta_path.insert(0, _UnbuiltExtensions(spec.name, directory, missing))
