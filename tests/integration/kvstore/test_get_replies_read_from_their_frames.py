"""A master process's get replies, over a connection with the cluster secret's frame MACs, are read from
their frames (kvstore.rpc.locations_frame) into the records the general decoding makes, also when two
requests are out at once and the second's reply is read first (the first's then waits, decoded the
general way, for its own receive), and a reader given them reads back the values it wrote."""

from __future__ import annotations

import os

from kvstore import Store
from kvstore.cluster.master_client import MasterClient
from kvstore.rpc import messages as m
from tests.integration.kvstore.conftest import Cluster


def test_get_replies_read_from_their_frames_are_the_general_records(cluster: Cluster) -> None:
    assert os.environ.get("KVSTORE_CLUSTER_SECRET")  # (the suite's: every frame carries its MAC)
    keys = [f"frame/{i}" for i in range(300)]
    with Store.connect(cluster.master) as store:
        for i, key in enumerate(keys):
            store.put(key, bytes([i % 251]) * (100 + i), replicas=1 + i % 2)
        asked = [*keys[:150], "frame/absent", *keys[150:]]
        master = MasterClient(cluster.master)
        try:
            general = m.GetReplicas.decode_reply(master.call(m.GetReplicas(keys=asked), raw=True))
            assert sum(x is None for x in general) == 1
            assert sorted(len(x.locations) for x in general if x)[-1] == 2  # (copies on both nodes)
            assert master.call(m.GetReplicas(keys=asked)) == general
            first, second = master.send(m.GetReplicas(keys=asked)), master.send(m.GetReplicas(keys=keys[:7]))
            assert master.receive(second) == general[:7]
            assert master.receive(first) == general
        finally:
            master.close()
        for i, key in enumerate(keys):  # (a store's own lookups take the same path)
            assert store.get(key) == bytes([i % 251]) * (100 + i)
