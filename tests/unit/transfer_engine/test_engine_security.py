"""What an engine reads of the cluster's security is its own (transfer_engine.security.EngineSecurity):
the secret, its strength rule and the choice to run without one; TLS to the master is kvstore's. A
TransferEngine takes its security in code (`security=`) or, by default, from the environment."""

from __future__ import annotations

import os

import numpy as np
import pytest

from transfer_engine import EngineSecurity, TransferEngine
from transfer_engine.errors import InvalidArgumentError, PermissionDeniedError

ANOTHER_SECRET = os.urandom(32).hex()  # (the suite's own is in the environment: tests/conftest.py)


def test_the_engine_reads_the_secret_and_nothing_of_the_master_rpc() -> None:
    names = [s.name for s in EngineSecurity.settings()]
    assert names == ["cluster_secret", "cluster_secret_file", "insecure"]
    assert [s.variable for s in EngineSecurity.settings()] == [
        "KVSTORE_CLUSTER_SECRET",
        "KVSTORE_CLUSTER_SECRET_FILE",
        "KVSTORE_INSECURE",
    ]


def test_an_engine_given_its_security_in_code_proves_that_secret_not_the_environments() -> None:
    given = EngineSecurity.load(cluster_secret=ANOTHER_SECRET)
    with (
        TransferEngine(host="127.0.0.1", security=given) as target,
        TransferEngine(host="127.0.0.1") as from_environment,
        TransferEngine(host="127.0.0.1", security=EngineSecurity(cluster_secret=ANOTHER_SECRET)) as sharing,
    ):
        region = target.allocate(4096)
        assert region.array is not None
        region.array[:] = np.arange(4096, dtype=np.uint32).astype(np.uint8)
        with pytest.raises(PermissionDeniedError, match="does not share this cluster secret"):
            from_environment.open_peer(target.name, "tcp")
        peer = sharing.open_peer(target.name, "tcp")
        local = sharing.allocate(4096)
        assert local.array is not None
        local.array[:] = 0xFF
        sharing.read(local.addr, peer, region.id, 0, 4096)
        assert np.array_equal(local.array, region.array)


def test_a_weak_secret_given_in_code_is_refused_before_the_engine_starts() -> None:
    with pytest.raises(InvalidArgumentError, match="KVSTORE_CLUSTER_SECRET: a cluster secret needs at least"):
        TransferEngine(host="127.0.0.1", security=EngineSecurity(cluster_secret="0123456789abcdef"))


def test_without_security_in_code_the_engine_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSTORE_CLUSTER_SECRET", "0123456789abcdef")
    with pytest.raises(InvalidArgumentError, match="KVSTORE_CLUSTER_SECRET: a cluster secret needs at least"):
        TransferEngine(host="127.0.0.1")


def test_the_master_rpcs_tls_settings_are_not_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    # (kvstore.config.security checks them for every kvstore process; an engine-only process, such as the
    # target of `python -m transfer_engine.bench`, speaks no RPC to a master)
    monkeypatch.setenv("KVSTORE_TLS_CERT", "/nonexistent/cert.pem")
    with TransferEngine(host="127.0.0.1") as engine:
        assert engine.name.startswith("127.0.0.1:")
