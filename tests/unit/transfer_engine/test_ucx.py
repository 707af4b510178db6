"""The ucx transport's loading and its place among transports (the contract suite covers what it moves;
tests/integration/test_two_processes.py and test_netns.py cover it across processes and hosts)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ucx_missing
from transfer_engine import NotSupportedError, TransferEngine

NO_UCX = """
import sys
sys.modules["libucx"] = None  # as without the ucx extra
from transfer_engine import TransferEngine, NotSupportedError
print(TransferEngine(ucx_prefer=True).unavailable_transports.get("ucx", ""))
try:
    TransferEngine(transport="ucx")
except NotSupportedError as exc:
    print("refused:", exc)
"""


NOT_LOADED = """
from transfer_engine import NotSupportedError, TransferEngine
TransferEngine().close()
maps = open("/proc/self/maps").read()
print("loaded" if "libucp" in maps or "libucs" in maps else "not-loaded")
"""


def test_without_ucx_the_transport_says_why_and_a_forced_one_refuses_to_start() -> None:
    env = {"PATH": "/usr/bin"}  # (no LD_LIBRARY_PATH: no UCX but a system one)
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    out = subprocess.run([sys.executable, "-c", NO_UCX], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    reason, refused = out.stdout.splitlines()
    if "not installed" not in reason:
        pytest.skip(f"a system UCX is found here without the wheel: {reason or 'usable'}")
    assert "pip install 'kvstore-llm[ucx]'" in reason and "KVSTORE_UCX_LIBRARY" in reason
    assert refused.startswith("refused: transport 'ucx' is unavailable: UCX is not installed")


def test_a_named_ucx_library_that_is_missing_is_a_clear_error() -> None:
    code = (
        "from transfer_engine import TransferEngine\n"
        "TransferEngine(ucx_library='/nonexistent/libucp.so.0', ucx_prefer=True)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert (
        "KVSTORE_UCX_LIBRARY=/nonexistent/libucp.so.0" in out.stderr and "InvalidArgumentError" in out.stderr
    )


def test_without_an_rdma_nic_ucx_stays_off_unless_asked() -> None:
    """UCX's tcp is slower than kvstore's: an engine starts UCX only with an RDMA NIC selected, when told
    to use it, or with ucx_prefer; then it reaches a peer that serves it too. Otherwise the process does
    not even load UCX (~0.4 s)."""
    if why := ucx_missing():
        pytest.skip(f"ucx: {why}")
    probe = subprocess.run(
        [sys.executable, "-c", NOT_LOADED], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )
    assert probe.returncode == 0 and probe.stdout.split() == ["not-loaded"], probe.stderr + probe.stdout
    with TransferEngine() as plain:
        assert plain.unavailable_transports["ucx"].startswith("not started: no RDMA NIC selected here")
    with (
        TransferEngine(ucx_prefer=True, shm_enabled=False, local_enabled=False) as a,
        TransferEngine(ucx_prefer=True) as b,
    ):
        assert "ucx" not in a.unavailable_transports
        assert a.open_peer(b.name).transport == "ucx"  # preferred: before tcp
    with TransferEngine(shm_enabled=False, local_enabled=False) as a, TransferEngine(ucx_prefer=True) as b:
        assert a.open_peer(b.name).transport == "tcp"  # this side did not start it


def test_with_a_secret_ucx_starts_only_on_a_fabric_declared_the_clusters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every other data path authenticates its connections and scopes keys to a session; UCX's one-sided
    transfers cannot, so in a cluster with a secret it starts only with KVSTORE_UCX_TRUST_FABRIC=1, and an
    engine told to use it refuses to start without it, saying why."""
    if why := ucx_missing():
        pytest.skip(f"ucx: {why}")
    monkeypatch.delenv("KVSTORE_UCX_TRUST_FABRIC")
    with TransferEngine(ucx_prefer=True) as engine:
        reason = engine.unavailable_transports.get("ucx", "")
        assert "KVSTORE_UCX_TRUST_FABRIC=1" in reason and "scoped to a session" in reason
    with pytest.raises(
        NotSupportedError, match="transport 'ucx' is unavailable: not started: with a cluster"
    ):
        TransferEngine(transport="ucx")
    with TransferEngine(transport="ucx", ucx_trust_fabric=True) as engine:
        assert "ucx" not in engine.unavailable_transports
    monkeypatch.delenv("KVSTORE_CLUSTER_SECRET")  # a cluster without one (loopback): no leave needed
    with TransferEngine(transport="ucx") as engine:
        assert "ucx" not in engine.unavailable_transports
