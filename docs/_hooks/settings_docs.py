"""A griffe extension for the API pages (mkdocs.yml): a config field declared as `name: T = setting(default,
"help", kind)` gets that help as its docstring, with its KVSTORE_* variable and its default, so the
settings of every component are listed from the code itself. Read statically: nothing is imported."""

from __future__ import annotations

import ast
from typing import Any

import griffe

# transfer_engine.settings.Settings' own prefix: a config class that sets no ENV_PREFIX inherits it.
BASE_PREFIX = "KVSTORE_"


class SettingsAsDocs(griffe.Extension):
    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, **_: Any
    ) -> None:
        call = getattr(node, "value", None)
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "setting"):
            return
        if len(call.args) < 2 or not isinstance(call.args[1], ast.Constant):
            return
        attr.extra["kvstore"] = {
            "help": str(call.args[1].value),
            "default": ast.unparse(call.args[0]),
            "kind": call.args[2].value
            if len(call.args) > 2 and isinstance(call.args[2], ast.Constant)
            else "",
        }
        attr.value = ast.unparse(call.args[0])  # (shown as the field's value: its default)
        attr.labels.add("setting")

    def on_package(self, *, pkg: griffe.Module, **_: Any) -> None:
        for cls in _classes(pkg):
            prefix = _prefix(cls)
            for attr in cls.members.values():
                if isinstance(attr, griffe.Attribute) and "kvstore" in attr.extra:
                    field = attr.extra["kvstore"]
                    unit = {"size": ": bytes, or a size such as 4GiB", "seconds": ": seconds"}.get(
                        field["kind"], ""
                    )
                    text = f"{field['help']}\n\nVariable `{prefix}{attr.name.upper()}`{unit}."
                    attr.docstring = griffe.Docstring(text, parent=attr)


def _classes(obj: griffe.Object) -> list[griffe.Class]:
    found: list[griffe.Class] = []
    for member in obj.members.values():
        if isinstance(member, griffe.Class):
            found.append(member)
        if isinstance(member, (griffe.Module, griffe.Class)):
            found += _classes(member)
    return found


def _prefix(cls: griffe.Class) -> str:
    own = cls.members.get("ENV_PREFIX")
    if isinstance(own, griffe.Attribute) and own.value is not None:
        return str(ast.literal_eval(str(own.value)))
    try:
        bases = cls.resolved_bases
    except Exception:  # (a base in a package not loaded: the default prefix)
        bases = []
    for base in bases:
        if isinstance(base, griffe.Class):
            return _prefix(base)
    return BASE_PREFIX
