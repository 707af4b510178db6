"""What systemd runs for deploy/systemd's units, short of systemd itself (no PID 1 here): each unit's
ExecStart, in an environment made of its example settings file (as EnvironmentFile= reads it) with only
the addresses, ports, secret path and segment size made local, and a NOTIFY_SOCKET as Type=notify sets:
the master and then a node come up from those settings alone and send READY=1, and the cluster serves."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvstore import Store
from kvstore.config.secret_file import new_secret_file
from tests.deploy.deploy_files import DEPLOY

SYSTEMD = DEPLOY / "systemd"
LOCAL = {  # what this test changes in the examples: nothing leaves 127.0.0.1, nothing is large
    "KVSTORE_MASTER_HOST": "127.0.0.1",
    "KVSTORE_MASTER_PORT": "0",
    "KVSTORE_MASTER_HTTP_PORT": "0",
    "KVSTORE_HOST": "127.0.0.1",
    "KVSTORE_PORT": "0",
    "KVSTORE_NODE_SEGMENT_SIZE": "16MiB",
}


def environment_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile= reads them (# comments and blank lines skipped)."""
    pairs = [line.split("=", 1) for line in path.read_text().splitlines() if line and line[0] != "#"]
    return {key.strip(): value.strip() for key, value in pairs}


def exec_start(unit: Path) -> list[str]:
    """The unit's command line, with this environment's kvstore in place of the installed path."""
    (line,) = [x for x in unit.read_text().splitlines() if x.startswith("ExecStart=")]
    command = line.removeprefix("ExecStart=").split()
    kvstore = shutil.which("kvstore") or str(Path(sys.executable).parent / "kvstore")
    return [kvstore, *command[1:]]


@contextmanager
def notified_service(role: str, settings: dict[str, str], sock: socket.socket) -> Iterator[dict[str, str]]:
    """Runs the role's unit command with `settings` as its whole KVSTORE_* environment; yields the fields
    of the notification it sends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSTORE_")}
    env.update(settings, NOTIFY_SOCKET=sock.getsockname())
    proc = subprocess.Popen(
        exec_start(SYSTEMD / f"kvstore-{role}@.service"),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        try:
            datagram = sock.recv(4096).decode()
        except TimeoutError:
            proc.kill()
            raise AssertionError(f"no READY=1 from the {role}: {proc.communicate()[1][-2000:]}") from None
        yield dict(field.split("=", 1) for field in datagram.split("\n"))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_master_and_node_start_from_the_example_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "cluster-secret"
    new_secret_file(secret)
    master_settings = {
        **environment_file(SYSTEMD / "master.env.example"),
        "KVSTORE_CLUSTER_SECRET_FILE": str(secret),
    }
    node_settings = {
        **environment_file(SYSTEMD / "node.env.example"),
        "KVSTORE_CLUSTER_SECRET_FILE": str(secret),
    }
    for settings in (master_settings, node_settings):
        settings.update({k: v for k, v in LOCAL.items() if k in settings})
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify"))
        sock.settimeout(60)
        with notified_service("master", master_settings, sock) as told:
            assert told["READY"] == "1", told
            address = told["STATUS"].removeprefix("master serving on ")
            assert address.startswith("127.0.0.1:"), told
            node_settings["KVSTORE_MASTER"] = address
            with notified_service("node", node_settings, sock) as told:
                assert told["READY"] == "1" and told["STATUS"].startswith("node serving: "), told
                monkeypatch.setenv("KVSTORE_CLUSTER_SECRET", secret.read_text().strip())  # (this client's)
                with Store.connect(address) as store:
                    store.put("unit/k", b"v" * 1000)
                    assert store.get("unit/k") == b"v" * 1000
