"""The hand-written stubs of the C++ extensions (transfer_engine/_core.pyi, _tools.pyi, kvstore/_meta.pyi)
agree with the extensions as built: mypy's stubtest finds no name, class or kind that differs, and the
stubs pybind11-stubgen generates from the bindings' own signatures have the same functions, parameters
(names, order) and defaults as the hand-written ones. Types are not compared: the generated ones are
pybind11's (SupportsInt, ArrayLike), the hand-written ones what callers pass."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MODULES = ("transfer_engine._core", "transfer_engine._tools", "kvstore._meta")
# A signature: kind (def, property, static, class, attr), parameter names in order, how many have defaults.
Shape = tuple[str, tuple[str, ...], int]


def _hand_written_stub(module: str) -> Path:
    package, name = module.rsplit(".", 1)
    return Path(importlib.import_module(package).__file__ or "").parent / f"{name}.pyi"


def _function_shape(node: ast.FunctionDef) -> tuple[str, Shape]:
    decorators = {ast.unparse(d) for d in node.decorator_list}
    args = node.args
    params = tuple(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs)
    defaults = len(args.defaults) + sum(d is not None for d in args.kw_defaults)
    if "property" in decorators:
        return node.name, ("property", (), 0)
    if any(d.endswith(".setter") for d in decorators):
        return node.name + ".setter", ("property", (), 0)
    kind = "static" if "staticmethod" in decorators else "def"
    if any(d.endswith("overload") for d in decorators):
        kind += " overload"
    return node.name, (kind, params, defaults)


def _shapes(stub: str) -> dict[str, list[Shape]]:
    """Every class, function (overloads in order), method, property and constant a stub declares."""
    found: dict[str, list[Shape]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found[prefix + node.name] = [("class", (), 0)]
                walk(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.FunctionDef):
                name, shape = _function_shape(node)
                found.setdefault(prefix + name, []).append(shape)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                found[prefix + node.target.id] = [("attr", (), 0)]
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id != "__all__":
                        found[prefix + target.id] = [("attr", (), 0)]

    walk(ast.parse(stub).body, "")
    # pybind11's own dunders (__init__ and __call__ aside) are not the project's API
    return {
        k: v
        for k, v in found.items()
        if not (
            k.rsplit(".", 1)[-1].startswith("__") and k.rsplit(".", 1)[-1] not in ("__init__", "__call__")
        )
    }


def _differences(hand: dict[str, list[Shape]], generated: dict[str, list[Shape]]) -> list[str]:
    return [
        f"{name}: stub {hand.get(name)} / extension {generated.get(name)}"
        for name in sorted(set(hand) | set(generated))
        if hand.get(name) != generated.get(name)
    ]


def test_shape_comparison_sees_a_missing_function_and_a_renamed_parameter() -> None:
    generated = _shapes(
        "class A:\n    def f(self, x: int, y: int = 0) -> None: ...\ndef g() -> None: ...\nK: int\n"
    )
    assert _differences(generated, generated) == []
    renamed = _shapes("class A:\n    def f(self, x: int, z: int = 0) -> None: ...\nK: int\n")
    assert _differences(renamed, generated) == [
        "A.f: stub [('def', ('self', 'x', 'z'), 1)] / extension [('def', ('self', 'x', 'y'), 1)]",
        "g: stub None / extension [('def', (), 0)]",
    ]


@pytest.mark.parametrize("module", MODULES)
def test_stub_matches_the_generated_one(module: str, tmp_path: Path) -> None:
    if shutil.which("pybind11-stubgen", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("pybind11-stubgen is not installed (the dev extra)")
    tool = Path(sys.executable).parent / "pybind11-stubgen"
    subprocess.run([str(tool), "-o", str(tmp_path), module], check=True, capture_output=True, timeout=120)
    generated = (tmp_path / Path(*module.split("."))).with_suffix(".pyi").read_text()
    hand = _hand_written_stub(module).read_text()
    assert _differences(_shapes(hand), _shapes(generated)) == []


def test_stubtest_finds_no_mismatch(tmp_path: Path) -> None:
    # mypy reads an installed package's stubs only if it declares py.typed, and an editable install's
    # extensions sit apart from their stubs: the stubs are handed to it on MYPYPATH, alone.
    stubs = tmp_path / "stubs"
    for module in MODULES:
        package = stubs / module.split(".")[0]
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.pyi").touch()
        shutil.copy(_hand_written_stub(module), package)
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "--concise", *MODULES],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(stubs)},
    )
    findings = [line for line in run.stdout.splitlines() if line.strip() and not _pybind11_own(line)]
    assert run.returncode in (0, 1) and run.stderr.strip() == "", run.stderr
    assert findings == []
    assert run.returncode == 0 or run.stdout.strip(), "stubtest failed without saying why"


def _pybind11_own(finding: str) -> bool:
    """What every pybind11 class differs in from any stub: its metaclass (pybind11_type), and the
    (*args, **kwargs) constructor of a class Python cannot construct (Batch: only Engine.submit makes one)."""
    return finding.endswith("metaclass differs") or finding.startswith(
        "transfer_engine._core.Batch.__init__ is inconsistent"
    )
