"""Every `kvstore` (sub)command parses its options as it did before they were declared once
(kvstore.cli_flags): representative command lines give the same namespaces, values are still checked, and
the options passed on as settings are the settings' own fields. The namespaces were recorded from the
parser before the flags table existed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kvstore import cli
from kvstore.config import IndexConfig, MasterConfig

CASES: list[tuple[list[str], dict[str, Any]]] = [
    (
        ["master"],
        {
            "admin_secret_file": None,
            "advertise_host": None,  # (added with --advertise-host, issue 43)
            "client_ttl": None,
            "cluster": None,
            "command": "master",
            "cool_access_rate": None,
            "etcd": None,
            "etcd_ca": None,
            "etcd_cert": None,
            "etcd_key": None,
            "etcd_password_file": None,
            "etcd_user": None,
            "eviction_policy": None,
            "heartbeat_interval": None,
            "heat_half_life": None,
            "high_watermark": None,
            "host": None,
            "hot_access_rate": None,
            "http_port": None,
            "insecure": False,
            "kv_events_endpoint": None,
            "kv_events_tcp": None,
            "leader_ttl": None,
            "lease_ttl": None,
            "low_watermark": None,
            "port": None,
            "put_timeout": None,
            "shard": None,  # (added with the shard options, issue 42)
            "shards": None,
        },
    ),
    (
        [
            "master",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--put-timeout",
            "2.5",
            "--heat-half-life",
            "60",
            "--etcd",
            "127.0.0.1:2379",
            "--cluster",
            "c1",
            "--leader-ttl",
            "3",
            "--etcd-ca",
            "ca.pem",
            "--kv-events-tcp",
            "--insecure",
        ],
        {
            "admin_secret_file": None,
            "advertise_host": None,  # (added with --advertise-host, issue 43)
            "client_ttl": None,
            "cluster": "c1",
            "command": "master",
            "cool_access_rate": None,
            "etcd": "127.0.0.1:2379",
            "etcd_ca": "ca.pem",
            "etcd_cert": None,
            "etcd_key": None,
            "etcd_password_file": None,
            "etcd_user": None,
            "eviction_policy": None,
            "heartbeat_interval": None,
            "heat_half_life": 60.0,
            "high_watermark": None,
            "host": "127.0.0.1",
            "hot_access_rate": None,
            "http_port": None,
            "insecure": True,
            "kv_events_endpoint": None,
            "kv_events_tcp": True,
            "leader_ttl": 3,
            "lease_ttl": None,
            "low_watermark": None,
            "port": 0,
            "put_timeout": 2.5,
            "shard": None,  # (added with the shard options, issue 42)
            "shards": None,
        },
    ),
    (
        [
            "node",
            "--master",
            "127.0.0.1:5000,127.0.0.1:5001",
            "--segment-size",
            "256MiB",
            "--pinned",
            "--disk-backend",
            "threads",
            "--transport",
            "tcp",
            "--etcd-password-file",
            "pw",
        ],
        {
            "cluster": None,
            "command": "node",
            "disk": None,
            "disk_backend": "threads",
            "disk_size": None,
            "etcd": None,
            "etcd_ca": None,
            "etcd_cert": None,
            "etcd_key": None,
            "etcd_password_file": "pw",
            "etcd_user": None,
            "host": None,
            "insecure": False,
            "master": "127.0.0.1:5000,127.0.0.1:5001",
            "memory_dir": None,
            "name": None,
            "pinned": True,
            "segment_size": 268435456,
            "transport": "tcp",
        },
    ),
    (
        ["index", "--port", "8710", "--hash-seed", "7", "--max-blocks", "100"],
        {
            "command": "index",
            "hash_seed": 7,
            "host": None,
            "insecure": False,
            "max_blocks": 100,
            "port": 8710,
        },
    ),
    (
        ["status", "--json", "--cluster", "c2"],
        {
            "cluster": "c2",
            "command": "status",
            "etcd": None,
            "etcd_ca": None,
            "etcd_cert": None,
            "etcd_key": None,
            "etcd_password_file": None,
            "etcd_user": None,
            "json": True,
            "master": None,
            "timeout": 5.0,
        },
    ),
    (
        ["config", "--component", "node", "--json"],
        {"command": "config", "component": "node", "json": True, "variables": False},
    ),
    (
        ["topology", "--nics", "eth0", "--json"],
        {"command": "topology", "json": True, "nics": "eth0", "sysfs_root": None},
    ),
    (
        ["secret", "new", "/tmp/s", "--force"],
        {"action": "new", "command": "secret", "force": True, "path": "/tmp/s"},
    ),
    (["bench"], {"bench": None, "command": "bench", "duration": 3.0}),
    (["bench", "--duration", "1"], {"bench": None, "command": "bench", "duration": 1.0}),
    (
        ["bench", "transfer", "--block-size", "64KiB", "--port", "0", "--gpu", "--json"],
        {
            "batch_size": 16,
            "bench": "transfer",
            "block_size": 65536,
            "command": "bench",
            "connections": None,
            "duration": 5.0,
            "gpu": True,
            "host": None,
            "json": True,
            "mode": "initiator",
            "nics": None,
            "no_baseline": False,
            "op": "read",
            "peer": None,
            "port": 0,
            "threads": 1,
            "transport": None,
            "working_set": 536870912,
        },
    ),
    (
        [
            "bench",
            "store",
            "--value-size",
            "4KiB",
            "--ops",
            "put,get",
            "--master",
            "127.0.0.1:5000",
            "--mode",
            "client",
        ],
        {
            "batch_size": 32,
            "bench": "store",
            "clients": 1,
            "command": "bench",
            "duration": 5.0,
            "json": False,
            "master": "127.0.0.1:5000",
            "mode": "client",
            "mooncake": None,
            "ops": "put,get",
            "rounds": 1,
            "segment_size": 2147483648,
            "transport": None,
            "value_size": 4096,
        },
    ),
    (
        ["bench", "master", "--objects", "10", "--clients", "2", "--master", "127.0.0.1:5000", "--json"],
        {
            "batch_size": 1000,
            "bench": "master",
            "clients": 2,
            "command": "bench",
            "duration": 3.0,
            "json": True,
            "master": "127.0.0.1:5000",
            "mode": "orchestrator",
            "mooncake": None,
            "objects": 10,
            "ops": "put,get,exists",
            "pipeline": 1,
            "shards": 1,
            "value_size": 1024,
        },
    ),
    (
        ["bench", "connector", "--case", "hybrid", "--engine", "vllm", "--blocks", "4", "--json"],
        {
            "bench": "connector",
            "blocks": 4,
            "case": "hybrid",
            "command": "bench",
            "duration": 3.0,
            "engine": "vllm",
            "json": True,
            "master": None,
            "model": None,
            "read_tp": 4,
            "requests": 20,
            "segment_size": 2147483648,
            "window": 128,
            "write_tp": 2,
        },
    ),
    (
        ["bench", "tier", "--gpu", "--value-size", "1MiB"],
        {
            "batch_size": 32,
            "bench": "tier",
            "command": "bench",
            "dir": ".",
            "disk_backend": "auto",
            "duration": 3.0,
            "json": False,
            "memory": 134217728,
            "tier": "gpu",
            "total": 536870912,
            "value_size": 1048576,
        },
    ),
    (
        ["bench", "tier", "--tier", "pinned", "--disk-backend", "threads"],
        {
            "batch_size": 32,
            "bench": "tier",
            "command": "bench",
            "dir": ".",
            "disk_backend": "threads",
            "duration": 3.0,
            "json": False,
            "memory": 134217728,
            "tier": "pinned",
            "total": 536870912,
            "value_size": 1048576,
        },
    ),
    (
        ["bench", "allocator", "--ops", "10"],
        {
            "bench": "allocator",
            "capacity": 4294967296,
            "command": "bench",
            "duration": 3.0,
            "json": False,
            "max_size": 1048576,
            "min_size": 4096,
            "ops": 10,
        },
    ),
    (
        [
            "bench",
            "trace",
            "t.jsonl",
            "--capacity-blocks",
            "5",
            "--heat-half-life",
            "30",
            "--plot",
            "p.png",
            "--limit",
            "3",
        ],
        {
            "bench": "trace",
            "block_tokens": 512,
            "bounds": False,
            "capacity_blocks": 5,
            "capacity_tokens": None,
            "command": "bench",
            "disk_capacity_blocks": None,
            "duration": 3.0,
            "heat_half_life": 30.0,
            "hot_rate": 0.005,
            "json": False,
            "limit": 3,
            "max_replicas": 3,
            "mode": "global",
            "nodes": 1,
            "payload_bytes": 1024,
            "plot": "p.png",
            "policy": "adaptive",
            "promote_window": 600.0,
            "replication": False,
            "route": "longest",
            "simulate": False,
            "trace": "t.jsonl",
        },
    ),
    (
        ["bench", "routing", "t.jsonl", "--limit", "5", "--no-store", "--plot", "r.png"],
        {
            "bench": "routing",
            "block_bytes": 67108864,
            "command": "bench",
            "duration": 3.0,
            "gpu_blocks": 600,
            "instances": 8,
            "json": False,
            "limit": 5,
            "no_store": True,
            "plot": "r.png",
            "prefill_tokens_per_s": 10000.0,
            "speedup": 1.0,
            "store_gbps": None,
            "trace": "t.jsonl",
        },
    ),
]


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_a_command_line_parses_as_before(argv: list[str], expected: dict[str, Any]) -> None:
    parser, _ = cli.build_parser()
    assert vars(parser.parse_args(argv)) == expected


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["node", "--segment-size", "0"], "size must be positive"),
        (["master", "--port", "70000"], "a port (0..65535) out of range"),
        (["node", "--master", "nowhere"], "--master"),
        (["bench", "store", "--batch-size", "0"], "a positive integer out of range"),
        (["bench", "tier", "--disk-backend", "fast"], "invalid choice"),
        (
            ["bench", "trace", "t.jsonl", "--capacity-blocks", "1", "--capacity-tokens", "1"],
            "not allowed with",
        ),
        (["bench", "transfer", "--transport", "carrier-pigeon"], "invalid choice"),
    ],
)
def test_a_bad_value_is_still_refused(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser, _ = cli.build_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(argv)
    assert exited.value.code == 2
    assert needle in capsys.readouterr().err


def test_the_options_passed_on_as_settings_are_the_settings_fields() -> None:
    assert set(cli._MASTER_FLAGS) <= {f.name for f in dataclasses.fields(MasterConfig)}
    assert len(cli._MASTER_FLAGS) == 22  # (--advertise-host, issue 43; --shard/--shards as settings, s44)
    index = cli.flags.dests(cli._INDEX_SETTINGS)
    assert index == ["host", "port", "hash_seed", "max_blocks"]
    assert set(index) <= {f.name for f in dataclasses.fields(IndexConfig)}
