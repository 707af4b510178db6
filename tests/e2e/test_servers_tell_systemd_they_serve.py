"""`kvstore master` and `kvstore node` started as a Type=notify unit starts them (NOTIFY_SOCKET set) send
READY=1 once they serve, after their READY line (deploy/systemd's units wait for it)."""

from __future__ import annotations

import socket
from pathlib import Path

from kvstore import Store
from tests.e2e.test_servers_and_config import server


def _notification(sock: socket.socket) -> dict[str, str]:
    fields = sock.recv(4096).decode().split("\n")
    return dict(field.split("=", 1) for field in fields)


def test_master_and_node_notify_systemd_when_they_serve(tmp_path: Path) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(30)
        with server("master", "--port", "0", NOTIFY_SOCKET=path) as (_, ready):
            address = ready.split()[0]
            told = _notification(sock)
            assert told == {"READY": "1", "STATUS": f"master serving on {address}"}
            with server("node", "--master", address, "--segment-size", "16MiB", NOTIFY_SOCKET=path):
                told = _notification(sock)
                assert told["READY"] == "1" and told["STATUS"].startswith("node serving: "), told
                with Store.connect(address) as store:  # READY meant serving: a put lands at once
                    store.put("k", b"v")
                    assert store.get("k") == b"v"
