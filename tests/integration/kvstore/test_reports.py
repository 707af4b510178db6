"""Reports are checked (issue 22, section 2): a client reports and acknowledges only in its own name
(the token it registered with), and one client's report of an unreachable node, while the node
heartbeats, makes it suspect for nobody else: the attack of a made-up client reporting a live node,
which made most puts and gets fail for everyone, changes nothing."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import pytest

from kvstore import Store
from kvstore.cluster.master_client import MasterClient
from kvstore.config.security import SecurityConfig
from kvstore.errors import PermissionDeniedError
from kvstore.master.wire.server import EmbeddedMaster, Master
from kvstore.rpc import messages as m
from transfer_engine import TransferEngine

SECRET = os.environ["KVSTORE_CLUSTER_SECRET"]  # the suite's (tests/conftest.py)
TOKEN = m.new_token()  # the made-up client's own
MADE_UP = m.client_id_for(TOKEN)  # (a client id is its token's)


@pytest.fixture
def master() -> Iterator[EmbeddedMaster]:
    embedded = Master.start_in_thread(security=SecurityConfig(cluster_secret=SECRET))
    yield embedded
    embedded.close()


@pytest.fixture
def outsider(master: EmbeddedMaster) -> Iterator[MasterClient]:
    """A process of the cluster (it has the secret) that registered a client of its own."""
    client = MasterClient(master.address, secret=SECRET.encode())
    client.call(m.RegisterClient(client_id=MADE_UP, host_id="elsewhere", token=TOKEN))
    yield client
    client.close()


def test_a_report_in_another_clients_name_is_refused(master: EmbeddedMaster, outsider: MasterClient) -> None:
    with Store.connect(master.address, segment_size=8 << 20) as store:
        store.put("kept", b"x" * 4096)
        engine = store.session.engine.name
        (found,) = store.master.call(m.GetReplicas(keys=["kept"]))
        _size, checksum, (where, *_) = found
        corrupt = [m.CorruptReplica("kept", engine, where.region_id, where.offset, checksum)]
        forged = m.ReportReplicas(store.client_id, [engine], corrupt, token=m.new_token())
        with pytest.raises(PermissionDeniedError, match="registered by another process"):
            outsider.call(forged)
        with pytest.raises(PermissionDeniedError, match="not its token's"):  # nor its name
            outsider.call(m.RegisterClient(client_id=store.client_id, host_id="h", token=m.new_token()))
        for other in (  # nothing else in its name either: acknowledgements of kills and holds, its close
            m.AwaitWork(store.client_id, 0.0, acked=[1], held_through=1 << 40),
            m.CloseClient(store.client_id),
            m.PutEnd(store.client_id, ["kept"]),
        ):
            with pytest.raises(PermissionDeniedError, match="registered by another process"):
                outsider.call(other)
        assert store.get("kept") == b"x" * 4096  # the forged corrupt report dropped nothing
        stats = outsider.call(m.Stats())
        assert stats["suspected_segments"] == 0 and stats["corrupt_replicas"] == 0
        # In its own name, a "corrupt" report of a good replica is checked by the node that holds it
        outsider.call(m.ReportReplicas(MADE_UP, [], corrupt, token=TOKEN))
        deadline = time.monotonic() + 5
        while outsider.call(m.Stats())["corrupt_reports_refuted"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert store.get("kept") == b"x" * 4096 and outsider.call(m.Stats())["corrupt_replicas"] == 0


def test_one_clients_reports_of_a_live_node_change_nothing_for_the_others(
    master: EmbeddedMaster, outsider: MasterClient
) -> None:
    with (
        Store.connect(master.address, segment_size=8 << 20) as first,
        Store.connect(master.address, segment_size=8 << 20) as second,
    ):
        target = first.session.engine.name
        for _ in range(20):  # in its own name, as often as it likes
            outsider.call(m.ReportReplicas(MADE_UP, [target], [], token=TOKEN))
        keys = [f"k{i}" for i in range(20)]
        assert second.batch_put_from(keys, [b"v" * 4096] * 20, replicas=2) == [0] * 20  # both nodes
        assert second.batch_get(keys) == [b"v" * 4096] * 20
        assert all(second.batch_exists(keys))
        assert outsider.call(m.Stats())["suspected_segments"] == 0


def test_a_mount_is_checked_against_the_engine_it_names(
    master: EmbeddedMaster, outsider: MasterClient
) -> None:
    """The fake-mount attack: a client mounting a region of a real node's engine (or a made-up one) had
    the master place other clients' objects where nobody could read them."""
    outsider.identify(MADE_UP, TOKEN)
    with Store.connect(master.address, segment_size=8 << 20) as node:
        engine = node.session.engine.name
        region = max((r for r in node.session.engine.regions() if r.exported), key=lambda r: r.length)
        cases = {
            "is not this client's": (engine, region.id, region.length),  # another client's engine
            "could not reach": ("127.0.0.1:9", 1, 1 << 20),  # (port 9: nothing listens)
        }
        for why, (name, region_id, size) in cases.items():
            with pytest.raises(PermissionDeniedError, match=why):
                outsider.call(m.MountSegment(MADE_UP, name, region_id, size, "elsewhere", 1024))
        stats = outsider.call(m.Stats())
        assert stats["segments"] == 1  # the node's own only
        keys = [f"k{i}" for i in range(30)]
        assert node.batch_put_from(keys, [b"v" * 4096] * 30) == [0] * 30
        assert node.batch_get(keys) == [b"v" * 4096] * 30
    client = MasterClient(master.address, secret=SECRET.encode())
    with TransferEngine() as own, contextlib.closing(client):
        token = m.new_token()
        own_id = m.client_id_for(token)
        client.identify(own_id, token)
        client.call(m.RegisterClient(client_id=own_id, host_id="h", token=token))
        own.set_owner(own_id)
        buffer = own.allocate(1 << 20)  # (exported)
        for why, (region_id, size) in {
            "exports no region": (buffer.id + 1000, 1 << 20),
            "holds 1048576 bytes, not": (buffer.id, 2 << 20),
        }.items():
            with pytest.raises(PermissionDeniedError, match=why):
                client.call(m.MountSegment(own_id, own.name, region_id, size, "h", 1024))
        assert client.call(m.MountSegment(own_id, own.name, buffer.id, 1 << 20, "h", 1024)) >= 1
