"""A Session given its security in code (kvstore.config.security.SecurityConfig) proves that secret, not
the environment's, both to the master and with its transfer engine: the engine does not read the
environment again. The suite's own secret is in the environment (tests/conftest.py); the master here
takes another one in code."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from kvstore.cluster.session import Session
from kvstore.config import MasterConfig, StoreConfig
from kvstore.config.security import SecurityConfig
from kvstore.master import Master
from transfer_engine import EngineSecurity, TransferEngine
from transfer_engine.errors import PermissionDeniedError

GIVEN_SECRET = os.urandom(32).hex()


def given() -> SecurityConfig:
    return SecurityConfig.load({}, cluster_secret=GIVEN_SECRET)  # ({}: nothing from the environment)


@pytest.fixture
def master_address() -> Iterator[str]:
    master = Master.start_in_thread(MasterConfig.load(port=0, busy_poll_us=0), security=given())
    try:
        yield master.address
    finally:
        master.stop()


def client_config(address: str) -> StoreConfig:
    return StoreConfig.load(master=address, host="127.0.0.1", rpc_busy_poll_us=0, rpc_timeout=5.0)


def test_a_session_given_its_security_has_an_engine_that_proves_it(master_address: str) -> None:
    assert os.environ["KVSTORE_CLUSTER_SECRET"] != GIVEN_SECRET
    security = given()
    session = Session(client_config(master_address), security=security)  # (joins: the master's secret)
    try:
        assert session.security is security
        region = session.engine.allocate(4096)
        assert region.array is not None
        region.array[:] = np.arange(4096, dtype=np.uint32).astype(np.uint8)
        with (
            TransferEngine(host="127.0.0.1") as from_environment,
            TransferEngine(host="127.0.0.1", security=EngineSecurity(cluster_secret=GIVEN_SECRET)) as sharing,
        ):
            with pytest.raises(PermissionDeniedError, match="does not share this cluster secret"):
                from_environment.open_peer(session.engine.name, "tcp")
            peer = sharing.open_peer(session.engine.name, "tcp")
            local = sharing.allocate(4096)
            assert local.array is not None
            local.array[:] = 0xFF
            sharing.read(local.addr, peer, region.id, 0, 4096)
            assert np.array_equal(local.array, region.array)
    finally:
        session.close()


def test_a_session_without_security_in_code_proves_the_environments(master_address: str) -> None:
    # (the master takes only the given secret: the environment's is refused at the first hello)
    with pytest.raises(PermissionDeniedError, match="does not share this cluster secret"):
        Session(client_config(master_address))
