"""The quickstart's cluster and the engine pages' Mooncake example, run as a reader would: the master and
the node started with the flags of the quickstart's shell block (free ports instead of 50051 and 9100, a
small segment instead of 4 GiB), then the block's `kvstore status`, the cluster client example, /health,
and the Mooncake page's program against that master."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.e2e.test_cli import kvstore
from tests.e2e.test_servers_and_config import server
from tests.helpers.markdown_docs import SOURCE, kvstore_commands, split_fences

_FIXED = {"50051": "0", "9100": "0", "4GiB": "256MiB"}  # (ports others may hold; memory CI may lack)


def _commands(page: str) -> dict[str, list[str]]:
    """The kvstore commands, by subcommand, of the page's first shell block that starts a master."""
    blocks, _ = split_fences((SOURCE / "docs" / page).read_text(encoding="utf-8"))
    for block in blocks:
        found = {command.argv[0]: command.argv for command in kvstore_commands(block)}
        if "master" in found:
            return found
    return {}


def _python_block(page: str) -> str:
    blocks, _ = split_fences((SOURCE / "docs" / page).read_text(encoding="utf-8"))
    return next(block.body for block in blocks if block.lang == "python")


def test_the_quickstart_cluster_and_the_mooncake_example_run(tmp_path: Path) -> None:
    commands = _commands("quickstart.md")
    assert set(commands) >= {"master", "node", "status"}
    master_argv = [_FIXED.get(word, word) for word in commands["master"]]
    with server(*master_argv) as (_, ready):
        address, http = ready.split()[0], ready.split("http=")[1]
        node_argv = [
            address if word == "127.0.0.1:50051" else _FIXED.get(word, word) for word in commands["node"]
        ]
        with server(*node_argv):
            status = kvstore(*[address if word == "127.0.0.1:50051" else word for word in commands["status"]])
            assert status.returncode == 0 and "memory" in status.stdout, status.stderr

            client = subprocess.run(
                [sys.executable, str(SOURCE / "examples" / "cluster_client.py"), address],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
            )
            assert client.returncode == 0 and "get: [1048576, 1048576" in client.stdout, client.stderr

            with urllib.request.urlopen(f"http://{http}/health", timeout=10) as reply:
                assert json.loads(reply.read())["status"] == "ok"

            program = _python_block("engines/mooncake.md").replace("127.0.0.1:50051", address)
            script = tmp_path / "mooncake_example.py"
            script.write_text(program)
            done = subprocess.run(
                [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
            )
            assert done.returncode == 0, done.stderr[-2000:]
            assert done.stdout.splitlines() == ["0 b'value' 1", "b''"]
