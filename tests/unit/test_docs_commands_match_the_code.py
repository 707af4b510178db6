"""What the README and the docs site tell a user to type is true of this code: every `kvstore` command of
their shell blocks parses with the real command line (no flag or subcommand that is not there), every
KVSTORE_* variable they name is one kvstore reads, every Python block compiles and its imports resolve,
the connector classes the engine pages name exist where they say, and the README's 15-line example runs
as written."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvstore.cli import build_parser
from kvstore.config import known_variables
from tests.helpers.markdown_docs import (
    SHELL_LANGS,
    SOURCE,
    CodeBlock,
    doc_files,
    kvstore_commands,
    split_fences,
)

_VARIABLE = re.compile(r"(-D)?(KVSTORE_[A-Z0-9_]*[A-Z0-9])(_<|_\*)?")
# Named in the docs on purpose, though kvstore itself does not read them.
_NOT_SETTINGS = {
    "KVSTORE_PROTOCOL": "the renamed variable the docs warn about (now KVSTORE_TRANSPORT)",
    "KVSTORE_TEST_VENV": "tests/run's own (it unsets it before the suite)",
}
_MODULE = re.compile(r"kvstore\.integrations\.\w+")
_CLASS = re.compile(r"\bKVStore[A-Z]\w*")


def _blocks(*langs: str) -> list[tuple[Path, CodeBlock]]:
    return [
        (page, block)
        for page in doc_files()
        for block in split_fences(page.read_text(encoding="utf-8"))[0]
        if block.lang in langs
    ]


def test_every_kvstore_command_in_the_docs_parses() -> None:
    parser, _ = build_parser()
    commands = [
        (page, command) for page, block in _blocks(*SHELL_LANGS) for command in kvstore_commands(block)
    ]
    assert len(commands) >= 15  # (the quickstart, deploy, HA, shards, security and monitoring pages)
    refused = []
    for page, command in commands:
        argv = [word for word in command.argv if word not in ("-h", "--help")]  # (help prints and exits)
        try:
            parser.parse_args(argv)
        except SystemExit:
            refused.append(f"{page.relative_to(SOURCE)}:{command.line}: kvstore {' '.join(command.argv)}")
    assert refused == []


def test_a_command_with_a_flag_that_is_not_there_is_refused() -> None:
    parser, _ = build_parser()
    block = CodeBlock("bash", "kvstore node --master 127.0.0.1:50051 --segment-size 4GiB --no-such-flag", 1)
    (command,) = kvstore_commands(block)
    with pytest.raises(SystemExit):
        parser.parse_args(command.argv)


def test_commands_are_read_as_a_shell_reads_them() -> None:
    body = (
        "export KVSTORE_CLUSTER_SECRET_FILE=/etc/kvstore/cluster.secret\n"
        "for port in 50051 50052; do\n"
        "  kvstore master --port $port --etcd 127.0.0.1:2379 --cluster prod < /dev/null &\n"
        "done\n"
        "KVSTORE_MASTER=h:1 kvstore status --json && kvstore config --component node  # a comment\n"
        "kvstore master --port $((50051 + 10 * shard)) --http-port 9100 \\\n  --shards 2\n"
        "curl -s localhost:9100/health\n"
    )
    found = [command.argv for command in kvstore_commands(CodeBlock("bash", body, 1))]
    assert found == [
        ["master", "--port", "1", "--etcd", "127.0.0.1:2379", "--cluster", "prod"],
        ["status", "--json"],
        ["config", "--component", "node"],
        ["master", "--port", "1", "--http-port", "9100", "--shards", "2"],
    ]


def test_every_kvstore_variable_the_docs_name_is_read_by_kvstore() -> None:
    known = known_variables()
    unknown = set()
    for page in doc_files():
        for m in _VARIABLE.finditer(page.read_text(encoding="utf-8")):
            cmake_define, name, pattern = m.groups()
            if not (cmake_define or pattern or name in known or name in _NOT_SETTINGS):
                unknown.add(f"{page.relative_to(SOURCE)}: {name}")
    assert sorted(unknown) == []


def test_every_python_block_compiles_and_its_imports_resolve() -> None:
    blocks = _blocks("python", "py")
    assert len(blocks) >= 5
    unresolved = []
    for page, block in blocks:
        tree = ast.parse(block.body, filename=f"{page}:{block.line}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                unresolved += [
                    f"{page.relative_to(SOURCE)}:{block.line}: from {node.module} import {alias.name}"
                    for alias in node.names
                    if not hasattr(module, alias.name)
                ]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
    assert unresolved == []


def test_the_connector_classes_the_engine_pages_name_exist() -> None:
    # An engine's configuration block names one connector module and the classes to load from it.
    named = set()
    for _, block in _blocks(*SHELL_LANGS, "", "yaml", "json", "text"):
        modules = set(_MODULE.findall(block.body))
        if len(modules) == 1:
            module = modules.pop()
            named |= {(module, cls) for cls in _CLASS.findall(block.body)}
    assert {("kvstore.integrations.vllm", "KVStoreConnector")} <= named and len(named) >= 3
    for module, cls in sorted(named):
        spec = importlib.util.find_spec(module)  # (without importing it: the engine may not be here)
        assert spec is not None and spec.origin is not None, module
        source = Path(spec.origin).read_text(encoding="utf-8")
        assert re.search(rf"^class {cls}\b", source, re.MULTILINE), f"{module} defines no class {cls}"


def test_the_readmes_15_line_example_runs_as_written(tmp_path: Path) -> None:
    (example,) = [block for page, block in _blocks("python") if page.name == "README.md"][:1]
    assert "Store.embedded" in example.body and len(example.body.splitlines()) <= 15
    script = tmp_path / "example.py"
    script.write_text(
        example.body + "\n    assert store.get('prefix/abc') == b'kv bytes'\n    print('ran')\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ran"), done.stderr[-2000:]


def test_the_errors_page_lists_every_error_the_store_defines() -> None:
    """The page names kvstore.errors' own classes one by one (the module re-exports the transfer engine's
    too, which the page shows once, from their own module): a new one must be added there."""
    tree = ast.parse((SOURCE / "kvstore" / "errors.py").read_text(encoding="utf-8"))
    defined = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    page = (SOURCE / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^ +- (\w+)$", page, re.MULTILINE))
    assert {name for name in defined if not name.startswith("_")} == listed
