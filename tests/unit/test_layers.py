"""The layer rules themselves: the C++ include check finds what it must (and the real tree passes)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.check_includes import violations

CSRC = Path(os.environ.get("KVSTORE_SOURCE_DIR", Path(__file__).resolve().parents[2])) / "csrc"


def test_the_tree_follows_the_include_rules() -> None:
    assert violations(CSRC) == []


def test_engine_and_binding_name_no_transport() -> None:
    names = [p.name for p in (CSRC / "transport").iterdir() if p.is_dir()]
    assert set(names) >= {"tcp", "shm", "local"}
    for layer in ("engine", "bind"):
        for path in (CSRC / layer).rglob("*.[ch]*"):
            text = path.read_text()
            for name in names:
                assert f"transport/{name}/" not in text and f"{name}::" not in text, (path, name)


def test_violations_are_reported(tmp_path: Path) -> None:
    (tmp_path / "transport" / "tcp").mkdir(parents=True)
    (tmp_path / "engine").mkdir()
    (tmp_path / "core").mkdir()
    (tmp_path / "transport" / "tcp" / "x.cpp").write_text(
        '#include "engine/engine.h"\n#include "core/batch.h"\n'
    )
    (tmp_path / "transport" / "tcp" / "y.cpp").write_text('#include "transport/shm/shm_transport.h"\n')
    (tmp_path / "engine" / "e.cpp").write_text('#include "transport/tcp/tcp_transport.h"\n')
    (tmp_path / "core" / "c.h").write_text('#include "transport/transport.h"\n')
    found = violations(tmp_path)
    assert len(found) == 4, found
    assert any("x.cpp:1" in f for f in found) and not any("x.cpp:2" in f for f in found)


# The only modules that load a C++ extension; everything else reaches C++ through them.
EXTENSION_GATES = {
    "transfer_engine._core": {
        "transfer_engine.engine",
        "transfer_engine.config",
        "transfer_engine.checksum",
        "transfer_engine.disk",
        "transfer_engine.cuda",
        "transfer_engine.topology",
    },
    "transfer_engine._tools": {"transfer_engine.bench"},
    "kvstore._meta": {
        "kvstore.allocator",
        "kvstore.master.ledger.holds",  # (the hold book: csrc/meta/hold_book)
        "kvstore.master.ledger.objects",
        "kvstore.master.planners.eviction",
        "kvstore.master.service.handlers",  # (put_start's reply, encoded in C++: csrc/meta/put_reply)
        "kvstore.rpc.locations_frame",  # (a get's reply frame, read in C++: csrc/meta/locations_reply)
        "kvstore.rpc.validate",  # (a request's keys checked in one C++ pass: plain_keys)
    },
}


def _imports(path: Path, module: str) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_extensions_are_reached_through_named_public_modules() -> None:
    source = CSRC.parent
    for package in ("transfer_engine", "kvstore"):
        for path in (source / package).rglob("*.py"):
            module = ".".join(path.relative_to(source).with_suffix("").parts).removesuffix(".__init__")
            for extension, gates in EXTENSION_GATES.items():
                if extension in _imports(path, module):
                    assert module in gates, f"{module} imports {extension}; go through {sorted(gates)}"


def test_segment_space_has_one_writer() -> None:
    """Only kvstore.master.ledger carves, takes back or frees space inside segments (memory and disk),
    hands out or returns fence slots, changes a segment's allocation count or restore state, and issues or
    acknowledges the kills that fence freed allocations off; placement, eviction, replication and
    demotion ask it."""
    import re

    writes = re.compile(
        r"\.allocator\.(allocate|allocate_many|free|reserve)\("
        r"|\.take_slot\(|\.free_slots\s*=(?!=)|\.free_slots\.(append|extend|pop|remove|clear)\("
        r"|\.next_slot\s*=(?!=)|\.restoring\s*=(?!=)|\.restoring\.(add|discard|remove|clear)\("
        r"|(segment|seg)\.allocations\s*[-+]?=(?!=)"
        r"|fences\.(kill|acknowledge|drop_segment|generation|observe|expire)\("
        r"|held_bytes\s*[-+]?=(?!=)"
    )
    for path in (CSRC.parent / "kvstore").rglob("*.py"):
        if path.name in ("ledger.py", "fences.py") or "bench" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not writes.search(line), f"{path.name}:{number} writes segment space: {line.strip()}"


def test_the_object_table_has_one_writer() -> None:
    """Only kvstore.master.ledger adds or removes segments (of every tier) and objects, commits them, or
    changes their replicas or disk records; the rest of the master plans and hands it typed records."""
    import re

    writes = re.compile(
        r"objects\[[^\]]*\]\s*=(?!=)"  # objects[key] = ...
        r"|objects\.(pop|clear|update|setdefault|popitem)\("
        r"|(segments|disks)\[[^\]]*\]\s*=(?!=)|del [\w.]*(segments|disks)\["
        r"|(segments|disks)\.(pop|clear|update|setdefault|popitem)\("
        r"|\.replicas\s*=(?!=)|\.replicas\.(append|remove|pop|extend|insert|clear)\("
        r"|(?<!self)\.disk\s*=(?!=)"
        r"|\.complete\s*=(?!=)"
    )
    for path in (CSRC.parent / "kvstore" / "master").rglob("*.py"):
        if path.name == "ledger.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not writes.search(line), (
                f"{path.name}:{number} writes the object table itself: {line.strip()}"
            )


def test_the_master_index_config_and_errors_never_load_the_data_plane_extension() -> None:
    """A master, the routing index (and a tool that needs only errors or settings) run without the
    transfer engine's extension loaded: `transfer_engine` and `kvstore` import their engine and client
    names on first use, and checking an environment that names no transport option does not list the
    transports."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "import kvstore.errors, kvstore.config, kvstore.master.wire.server, kvstore.rpc.auth\n"
        "import kvstore.index.process\n"
        "import transfer_engine, transfer_engine.errors, transfer_engine.settings\n"
        "from kvstore.config import MasterConfig\n"
        "env = {'KVSTORE_MASTER': '127.0.0.1:9', 'KVSTORE_NODE_SEGMENT_SIZE': '1GiB',\n"
        "       'KVSTORE_COPY_THREADS': '4'}\n"
        "MasterConfig.load(env)  # (a master checking an environment shared with clients and nodes)\n"
        "assert 'transfer_engine._core' not in sys.modules, 'loaded'\n"
        "from kvstore import Store, MISS\n"
        "from transfer_engine import TransferEngine\n"
        "assert 'transfer_engine._core' in sys.modules, 'the lazy names did not load it'\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
