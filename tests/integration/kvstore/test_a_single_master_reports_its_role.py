"""A master without etcd reports its place as monitoring reads it (issue 43, section 5): role single,
serving (kvstore_master_is_leader 1, /health/leader 200), epoch 0, itself as the leader, labelled with
its cluster's own name and its shard, beside its build, its store metrics and health as before."""

from __future__ import annotations

from kvstore.procs import kvstore_process
from tests.integration.kvstore.test_standby_masters_serve_health_and_metrics import Candidate, value


def test_a_shard_master_without_etcd_says_single_and_serving() -> None:
    args = ["master", "--port", "0", "--http-port", "0", "--shard", "1", "--shards", "2"]
    with kvstore_process(args) as (proc, ready):
        master = Candidate(proc, ready)
        samples = master.samples()
        where = {"cluster": "default", "shard": "1"}  # (not the shard's etcd name, default.shard-1)
        assert value(samples, "kvstore_master_is_leader", **where) == 1
        assert value(samples, "kvstore_master_role", role="single", **where) == 1
        assert value(samples, "kvstore_master_role", role="leader", **where) == 0
        assert value(samples, "kvstore_master_epoch", **where) == 0
        assert value(samples, "kvstore_master_leader_info", leader=master.address, **where) == 1
        assert value(samples, "kvstore_build_info") == 1 and "kvstore_objects" in samples
        assert "kvstore_master_standbys" not in samples
        for path in ("/health", "/health/leader"):
            status, health = master.health(path)
            assert status == 200 and health["role"] == "single" and health["status"] == "ok", health
            assert health["shard"] == 1 and health["shards"] == 2 and health["cluster"] == "default"
            assert health["leader"] == health["address"] == master.address and "objects" in health
