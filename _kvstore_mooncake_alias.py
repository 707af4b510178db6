"""Opt-in import alias: with KVSTORE_MOONCAKE_ALIAS=1, `import mooncake.store` and `import mooncake.engine`
give kvstore's Mooncake-compatible layer (kvstore.integrations.mooncake), so an engine's built-in Mooncake
integration (vLLM's MooncakeStoreConnector, SGLang's mooncake HiCache backend) runs unchanged on kvstore.

Installed as a top-level module with a .pth line that imports it only when the variable is set: nothing
of kvstore is imported at interpreter start-up otherwise, and an installed Mooncake wins unless asked.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence

ALIASES = {
    "mooncake.store": "kvstore.integrations.mooncake",
    "mooncake.engine": "kvstore.integrations.mooncake",
    "mooncake.mooncake_connector_v1": "kvstore.integrations.mooncake",
}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str | None) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        if self.target is None:  # the `mooncake` package itself: empty, holding the aliases
            module = types.ModuleType(spec.name, "kvstore's stand-in for the mooncake package")
            module.__path__ = []
            return module
        return importlib.import_module(self.target)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class MooncakeAliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "mooncake":
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(None), is_package=True)
        if fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(ALIASES[fullname]))
        return None


def install() -> None:
    if not any(isinstance(f, MooncakeAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MooncakeAliasFinder())


if os.environ.get("KVSTORE_MOONCAKE_ALIAS") == "1":
    install()
