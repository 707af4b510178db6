"""What a standby reports of its leader comes from the leader key in a real etcd (kvstore.master.wire.role
over an Election's own connection): a signed leader record names the leader and its epoch (the revision
that wrote it); with no leader (the key gone, or a record that does not verify) it names none but keeps
the last epoch, so kvstore_master_epoch never goes back and a failover is one change of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstore.config.security import SecurityConfig
from kvstore.master.wire.election import Election
from kvstore.master.wire.role import READ_SECONDS, Leadership, Role, leader_reader
from kvstore.rpc import etcd as etcd_keys
from kvstore.rpc.etcd_records import LEADER, MasterRecord, Records
from tests.integration.kvstore.test_ha import etcd_server

CLUSTER = "epochs"


@pytest.fixture
def election(tmp_path: Path) -> Iterator[Election]:
    """A candidate's etcd side that never campaigns: the standby's connection to read through."""
    with etcd_server(tmp_path, "127.0.0.1") as (address, _):
        election = Election(address, CLUSTER, "127.0.0.1:1", 2)
        try:
            yield election
        finally:
            election.close()


def seen(role: Role) -> Leadership:
    """What the role knows after one more read of the leader key."""

    async def read() -> None:
        role._read_at -= READ_SECONDS  # (the last read counts as old: read now)
        await role.refresh()
        while role._reading is not None:  # (a loaded machine may take longer than a probe waits)
            await asyncio.sleep(0.01)

    asyncio.run(read())
    return role.leadership


def test_a_standby_names_the_leader_and_keeps_the_last_epoch(election: Election) -> None:
    client, key = election.client, etcd_keys.leader_key(CLUSTER)
    role = Role(CLUSTER, (0, 1), "127.0.0.1:1")
    role.stand_by(leader_reader(election))
    assert seen(role) == Leadership()  # nobody leads yet

    lease = client.lease(10)
    record = MasterRecord("10.0.0.7:50051", "run-1", int(lease.id), 3)
    client.put(key, Records(SecurityConfig.load().secret(), CLUSTER).encode(LEADER, record), lease=lease)
    _, meta = client.get(key)
    first = seen(role)
    assert first == Leadership("10.0.0.7:50051", int(meta.mod_revision)) and first.epoch > 0

    client.delete(key)  # the leader's lease ended: no leader, the epoch stays
    assert seen(role) == Leadership("", first.epoch)
    client.put(key, b'{"address":"6.6.6.6:1","id":"x","lease":0,"ttl":3}')  # not signed: no leader
    assert seen(role) == Leadership("", first.epoch)

    role.lead(first.epoch + 100)  # it leads: its own leadership, whatever a read finds
    assert seen(role) == Leadership("127.0.0.1:1", first.epoch + 100)
