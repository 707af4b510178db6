"""The `kvstore` command as a user runs it: real processes, real output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ucx_missing
from tests.helpers.cli import kvstore

ROOT = Path(__file__).resolve().parents[2]
JSON_FIELDS = {
    "transport",
    "op",
    "block_size",
    "batch_size",
    "threads",
    "connections",
    "duration_s",
    "bytes",
    "gbps",
    "ops_per_s",
    "p50_us",
    "p99_us",
    "baseline_gbps",
    "ratio",
}


@pytest.mark.parametrize(
    ("transport", "op"),
    [
        ("tcp", "read"),
        ("shm", "write"),
        ("local", "read"),
        ("auto", "read"),
        ("ucx", "read"),
        ("ucx", "write"),
    ],
)
def test_bench_transfer_json(transport: str, op: str) -> None:
    if transport == "ucx" and (reason := ucx_missing()):
        pytest.skip(f"ucx: {reason}")
    result = kvstore(
        "bench",
        "transfer",
        "--transport",
        transport,
        "--op",
        op,
        "--block-size",
        "256KiB",
        "--batch-size",
        "4",
        "--duration",
        "0.3",
        "--working-set",
        "16MiB",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    assert data.keys() >= JSON_FIELDS
    assert data["transport"] == ("shm" if transport == "auto" else transport)
    assert data["bytes"] > 0 and data["gbps"] > 0 and data["baseline_gbps"] > 0
    assert data["ratio"] == pytest.approx(data["gbps"] / data["baseline_gbps"])
    if transport == "ucx":  # (its baseline: a raw UCP loop to a target process of its own)
        assert "to another process" in data["baseline_kind"]
    assert data["p99_us"] >= data["p50_us"] > 0
    if data["transport"] in ("tcp", "ucx"):  # loopback: one path, where the kernel (or UCX) routes
        (path,) = data["paths"]
        assert path["local_nic"] == "" and path["share"] == 1.0 and path["bytes"] > 0 and path["up"]
    else:
        assert data["paths"] == []


def test_bench_transfer_table() -> None:
    result = kvstore(
        "bench",
        "transfer",
        "--transport",
        "tcp",
        "--duration",
        "0.3",
        "--working-set",
        "32MiB",
        "--no-baseline",
    )
    assert result.returncode == 0, result.stderr
    assert "bandwidth" in result.stdout and "GB/s" in result.stdout
    assert "baseline" not in result.stdout


def test_bench_against_a_running_target() -> None:
    target = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvstore.cli",
            "bench",
            "transfer",
            "--mode",
            "target",
            "--working-set",
            "16MiB",
        ],
        stdin=subprocess.DEVNULL,  # a server runs until signalled, whatever its stdin
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert target.stdout is not None
        ready = target.stdout.readline().split()
        assert ready[0] == "READY"
        result = kvstore(
            "bench",
            "transfer",
            "--peer",
            ready[1],
            "--transport",
            "tcp",
            "--duration",
            "0.3",
            "--working-set",
            "16MiB",
            "--no-baseline",
            "--json",
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["peer"] == ready[1]
    finally:
        target.send_signal(signal.SIGTERM)
        assert target.wait(timeout=10) == 0


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "transfer", "--block-size", "lots"],
        ["bench", "transfer", "--block-size", "0"],
        ["bench", "transfer", "--batch-size", "-1"],
        ["bench", "transfer", "--transport", "rdma"],
        ["bench", "transfer", "--duration", "nan?"],
        ["bench", "transfer", "--peer", "nohost"],
        ["bench", "transfer", "--peer", "h:99999"],
        ["bench", "nothing"],
        [],
    ],
)
def test_bad_arguments_are_clear_errors(args: list[str]) -> None:
    result = kvstore(*args)
    assert result.returncode == 2
    assert "error" in result.stderr and "Traceback" not in result.stderr


def test_unreachable_peer_is_an_error_not_a_traceback() -> None:
    result = kvstore("bench", "transfer", "--peer", "127.0.0.1:1", "--duration", "0.2", "--no-baseline")
    assert result.returncode == 1
    assert "kvstore: error:" in result.stderr and "Traceback" not in result.stderr


def test_block_larger_than_working_set() -> None:
    result = kvstore("bench", "transfer", "--block-size", "64MiB", "--working-set", "16MiB")
    assert result.returncode == 1 and "working set" in result.stderr


STORE_FIELDS = {"op", "value_size", "batch_size", "ops_per_s", "gbps", "p50_us", "p99_us"} | {
    "baseline_gbps",  # (new: the same run's ceiling for the same bytes, and the ratio to it)
    "ratio",
}


@pytest.mark.parametrize("transport", ["auto", "tcp"])
def test_bench_store_json(transport: str) -> None:
    result = kvstore(
        "bench",
        "store",
        "--duration",
        "0.3",
        "--value-size",
        "64KiB",
        "--batch-size",
        "8",
        "--segment-size",
        "64MiB",
        "--transport",
        transport,
        "--json",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["op"] for r in rows] == [
        "put",
        "get",
        "get_single",
        "get_uncached",
        "get_single_uncached",
        "exists",
    ]
    for r in rows:
        assert r.keys() >= STORE_FIELDS and r["ops_per_s"] > 0 and r["errors"] == 0
        assert r["transport"] == transport
        if r["op"] == "exists":  # (keys, not bytes: no ceiling)
            assert r["baseline_gbps"] is None and r["ratio"] is None
        else:  # the node is on this host: memcpy (auto: shm) or a raw tcp stream over loopback
            assert r["baseline_gbps"] > 0 and r["ratio"] == pytest.approx(r["gbps"] / r["baseline_gbps"])
            assert r["baseline_kind"].startswith("memcpy" if transport == "auto" else "raw tcp stream")


def test_bench_master_json() -> None:
    args = ("--objects", "3000", "--batch-size", "500", "--clients", "2", "--json")
    result = kvstore("bench", "master", *args, timeout=180)
    assert result.returncode == 0, result.stderr
    *rates, memory = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["op"] for r in rates] == ["put", "get", "exists"]
    for r in rates:
        assert r.keys() == {"op", "clients", "per_s", "p50_us", "p99_us", "errors", "pipeline"} | {
            "keys",  # (since the load processes run each op together: the keys over their common span)
            "started",
            "ended",
            "master_cpu_us",  # (the CPU the masters and the node used per key over the op's span)
            "node_cpu_us",
            "busiest_master_cpu",
        }
        assert r["clients"] == 2 and r["per_s"] > 0 and r["p99_us"] >= r["p50_us"] > 0 and r["errors"] == 0
        assert r["keys"] == 6000 and r["per_s"] == pytest.approx(6000 / (r["ended"] - r["started"]))
        assert r["pipeline"] == 1
    assert memory["objects"] == 6000 and isinstance(memory["rss_bytes_per_object"], float)
    # How long the master's loop was held: its longest turn, and its periodic and scrape tasks'.
    assert memory["loop_turn_max_ms"] > 0 and {"expire", "scrape_stats"} <= set(memory["task_max_ms"])


def test_bench_master_pipelined() -> None:
    """--pipeline: each load process keeps that many requests in flight; every key is still put once,
    then found."""
    args = ("--objects", "3000", "--batch-size", "250", "--pipeline", "3", "--ops", "put,get", "--json")
    result = kvstore("bench", "master", *args, timeout=180)
    assert result.returncode == 0, result.stderr
    *rates, _ = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [(r["op"], r["pipeline"], r["errors"]) for r in rates] == [("put", 3, 0), ("get", 3, 0)]
    refused = kvstore("bench", "master", "--pipeline", "65", timeout=60)
    assert refused.returncode != 0 and "--pipeline is 1..64" in refused.stderr


MOONCAKE_PYTHON = os.environ.get("MOONCAKE_PYTHON", "")


@pytest.mark.skipif(
    not MOONCAKE_PYTHON,
    reason="Mooncake's side needs a Python with mooncake-transfer-engine-non-cuda (MOONCAKE_PYTHON)",
)
def test_bench_master_beside_mooncake() -> None:
    args = ("--objects", "2000", "--batch-size", "500", "--json", "--mooncake", MOONCAKE_PYTHON)
    result = kvstore("bench", "master", *args, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
    theirs = [r for r in rows if r.get("system") == "mooncake"]
    assert [r["op"] for r in theirs[:3]] == ["put", "get", "exists"] and theirs[3]["objects"] == 2000
    assert all(r["per_s"] > 0 and r["errors"] == 0 for r in theirs[:3])


def test_bench_master_with_a_python_that_cannot_run_mooncake_is_an_error(tmp_path: Path) -> None:
    result = kvstore("bench", "master", "--objects", "1000", "--mooncake", str(tmp_path / "no-python"))
    assert result.returncode == 1 and "Mooncake" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batch-size", "5000"], "--batch-size"),
        (["--ops", "get,exists"], "--ops"),
        (["--ops", "put,fly"], "--ops"),
    ],
)
def test_bench_master_bad_arguments_are_errors(args: list[str], needle: str) -> None:
    result = kvstore("bench", "master", *args)
    assert result.returncode == 1 and needle in result.stderr and "Traceback" not in result.stderr


def test_bench_summary_runs_everything() -> None:
    result = kvstore("bench", "--duration", "0.3", timeout=300)
    assert result.returncode == 0, result.stderr
    for needle in ("store put", "store get", "store exists", "transfer shm", "transfer tcp", "ratio"):
        assert needle in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "store", "--value-size", "0"],
        ["bench", "store", "--transport", "rdma"],
        ["node", "--master", "nowhere"],
        ["master", "--port", "-1"],
    ],
)
def test_store_cli_bad_arguments(args: list[str]) -> None:
    result = kvstore(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_bench_store_bad_ops_is_an_error() -> None:
    result = kvstore("bench", "store", "--ops", "put,fly", "--duration", "0.1")
    assert result.returncode == 1 and "--ops" in result.stderr


def test_node_without_any_master_says_how_to_give_one() -> None:
    result = kvstore("node", "--segment-size", "16MiB")
    assert result.returncode == 1 and "KVSTORE_MASTER" in result.stderr and "Traceback" not in result.stderr


def test_node_without_master_fails_cleanly() -> None:
    result = kvstore("node", "--master", "127.0.0.1:1", "--segment-size", "16MiB", timeout=60)
    assert result.returncode == 1 and "kvstore: error:" in result.stderr and "Traceback" not in result.stderr


SHIPPED_TRACE = ROOT.parent / "shared" / "data" / "traces" / "conversation_trace.jsonl"
TRACE_FIELDS = {"trace", "mode", "nodes", "capacity_blocks", "policy", "hit_rate", "requests", "blocks"}


@pytest.mark.skipif(not SHIPPED_TRACE.exists(), reason="shipped trace not present")
@pytest.mark.parametrize("extra", [["--simulate"], ["--simulate", "--mode", "local", "--nodes", "3"], []])
def test_bench_trace_json(extra: list[str]) -> None:
    result = kvstore(
        "bench",
        "trace",
        str(SHIPPED_TRACE),
        "--limit",
        "300",
        "--capacity-blocks",
        "500",
        "--policy",
        "lru,adaptive",
        "--json",
        *extra,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["policy"] for r in rows] == ["lru", "adaptive"]
    for r in rows:
        assert r.keys() >= TRACE_FIELDS and 0 < r["hit_rate"] < 1 and r["requests"] == 300


@pytest.mark.skipif(not SHIPPED_TRACE.exists(), reason="shipped trace not present")
def test_bench_trace_plot_and_replication(tmp_path: Path) -> None:
    png = tmp_path / "hit_rate.png"
    result = kvstore(
        "bench",
        "trace",
        str(SHIPPED_TRACE),
        "--limit",
        "500",
        "--simulate",
        "--capacity-blocks",
        "300",
        "--policy",
        "lru,adaptive",
        "--plot",
        str(png),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = kvstore(
        "bench",
        "trace",
        str(SHIPPED_TRACE),
        "--limit",
        "500",
        "--simulate",
        "--nodes",
        "4",
        "--replication",
        "--json",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["reads_per_node"]) == 4 and data["timeline"]


@pytest.mark.skipif(not SHIPPED_TRACE.exists(), reason="shipped trace not present")
def test_bench_trace_bounds() -> None:
    args = ["bench", "trace", str(SHIPPED_TRACE), "--limit", "1500", "--capacity-blocks", "1000", "--bounds"]
    result = kvstore(*args, "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    b = json.loads(result.stdout)
    assert b["trace"] == SHIPPED_TRACE.name and b["capacity_blocks"] == 1000
    assert b["lru"] <= b["dead_block_oracle"] <= 1 and b["optimum"] >= b["lru"]
    assert 0 < b["fitted_ranking"] < 1 and b["continuation_odds"]["1"][0] > 0
    text = kvstore(*args, timeout=300)
    assert text.returncode == 0 and "offline optimum" in text.stdout


def test_bench_trace_with_a_disk_tier(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    requests = [[1, 2, 3], [4, 5, 6], [1, 2, 3], [1, 2, 7]]
    trace.write_text(
        "".join(json.dumps({"timestamp": i * 1000, "hash_ids": r}) + "\n" for i, r in enumerate(requests))
    )
    args = [
        "bench",
        "trace",
        str(trace),
        "--capacity-blocks",
        "2",
        "--disk-capacity-blocks",
        "10",
        "--policy",
        "lru",
    ]
    result = kvstore(*args, "--simulate", "--json")
    assert result.returncode == 0, result.stderr
    r = json.loads(result.stdout)
    assert r["disk_capacity_blocks"] == 10 and r["hits"] == 3 + 2  # everything fits memory + disk
    assert r["memory_hits"] + r["disk_hits"] == r["hits"] and r["disk_hits"] > 0 and r["demotions"] > 0
    text = kvstore(*args, "--simulate")
    assert text.returncode == 0 and "disk hits" in text.stdout
    real = kvstore(*args, "--json", "--payload-bytes", "256")  # a real store with a disk tier
    assert real.returncode == 0, real.stderr
    r = json.loads(real.stdout)
    # Demotion runs asynchronously, as deployed: on a 4-request trace some blocks are evicted before it.
    assert r["simulate"] is False and r["disk_capacity_blocks"] == 10 and 0 < r["hits"] <= 5
    assert r["memory_hits"] + r["disk_hits"] == r["hits"]
    refused = kvstore(*args, "--mode", "local", "--nodes", "2")  # not built for local mode: said
    assert refused.returncode == 1 and "global only" in refused.stderr


def test_bench_tier_disk(tmp_path: Path) -> None:
    """Puts overflow a small memory segment onto the disk tier; every object read back from disk, beside
    the file system's own O_DIRECT figures. Leaves no files behind."""
    args = ["bench", "tier", "--dir", str(tmp_path), "--value-size", "256KiB", "--batch-size", "8"]
    result = kvstore(*args, "--total", "64MiB", "--memory", "16MiB", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    r = json.loads(result.stdout)
    assert r["tier"] == "disk" and r["backend"] in ("io_uring", "threads") and r["misses"] == 0
    assert r["objects"] >= 128 and r["get_gbps"] > 0 and r["demote_gbps"] > 0
    assert r["baseline_read_gbps"] > 0 and r["get_ratio"] > 0 and r["demote_ratio"] > 0
    assert list(tmp_path.iterdir()) == []
    pinned = kvstore("bench", "tier", "--tier", "pinned", "--memory", "64MiB", "--batch-size", "8", "--json")
    assert pinned.returncode == 0, pinned.stderr
    p = json.loads(pinned.stdout)
    assert p["tier"] == "pinned" and p["backend"] in ("mlock", "cuda") and p["misses"] == 0
    assert p["get_gbps"] > 0 and p["baseline_read_gbps"] > 0
    bad = kvstore("bench", "tier", "--dir", str(tmp_path), "--value-size", "1000")
    assert bad.returncode == 1 and "multiple of 4KiB" in bad.stderr


def test_bench_tier_gpu_says_why_without_a_gpu() -> None:
    from transfer_engine import cuda

    if cuda.available():
        pytest.skip("a GPU is here: bench/gpu_check.sh runs the GPU tier bench")
    result = kvstore("bench", "tier", "--gpu", "--memory", "64MiB", "--batch-size", "8")
    assert result.returncode == 1 and "libcuda" in result.stderr and result.stdout == ""
    transfer = kvstore("bench", "transfer", "--gpu", "--duration", "0.2")  # before any target is started
    assert transfer.returncode == 1 and "libcuda" in transfer.stderr and transfer.stdout == ""


@pytest.mark.gpu
def test_bench_transfer_gpu_goes_by_cuda_ipc() -> None:
    result = kvstore("bench", "transfer", "--gpu", "--duration", "0.5", "--working-set", "64MiB", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["transport"] == "cuda_ipc" and report["failed_requests"] == 0
    assert report["gbps"] > 0 and report["baseline_gbps"] > 0
    forced = kvstore("bench", "transfer", "--gpu", "--transport", "tcp", "--duration", "0.2")
    assert forced.returncode == 1 and "cannot move gpu:0 <-> gpu:0" in forced.stderr


def test_bench_trace_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hash_ids": [1, 2]}\n{"hash_ids": "x"}\n')
    result = kvstore("bench", "trace", str(bad), "--simulate")
    assert result.returncode == 1 and "bad.jsonl:2" in result.stderr
    assert kvstore("bench", "trace", str(tmp_path / "missing.jsonl")).returncode == 1
    assert kvstore("bench", "trace", str(bad), "--policy", "nope").returncode == 1


def test_children_import_what_the_parent_imported(tmp_path: Path) -> None:
    """Run from a directory holding another `transfer_engine` (as a source checkout after a plain
    `pip install .` does): the bench's child processes must still import the installed package."""
    shadow = tmp_path / "transfer_engine"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadowing source tree was imported')\n")
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-m",
            "kvstore.cli",
            "bench",
            "transfer",
            "--transport",
            "tcp",
            "--duration",
            "0.2",
            "--working-set",
            "16MiB",
            "--no-baseline",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["bytes"] > 0


def test_bench_store_with_two_clients_counts_only_what_succeeded() -> None:
    """Two clients: each cleans up only its own keys (one client's cleanup used to wipe the other's
    resident set: thousands of errors counted as bytes moved)."""
    args = ["bench", "store", "--clients", "2", "--transport", "tcp", "--ops", "put,get", "--duration", "0.3"]
    # A pool large enough that one client's puts never evict the other's resident set: only the cleanup
    # (which used to be remove_all) could disturb it.
    result = kvstore(*args, "--value-size", "4KiB", "--batch-size", "8", "--segment-size", "512MiB", "--json")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert rows and all(r["errors"] == 0 and r["clients"] == 2 for r in rows)


def test_bench_store_errors_are_not_bytes_and_fail_the_run() -> None:
    """Against a master with no storage node every put fails: nothing counts, and the run says so."""
    from kvstore.procs import kvstore_process

    with kvstore_process(["master", "--port", "0"]) as (_, ready):
        address = ready.split()[0]
        result = kvstore(
            "bench", "store", "--master", address, "--ops", "put", "--duration", "0.2", "--json",
            "--value-size", "4KiB", "--batch-size", "4", "--segment-size", "16MiB",
        )  # fmt: skip
    assert result.returncode == 1
    (row,) = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert row["errors"] > 0 and row["gbps"] == 0 and row["ops_per_s"] == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_bench_connector_json(engine: str) -> None:
    """The connector bench moves verified bytes through both paths and reports the overhead."""
    r = kvstore(
        "bench", "connector", "--engine", engine, "--blocks", "4", "--requests", "2",
        "--segment-size", "256MiB", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["errors"] == 0 and out["requests"] == 2 and out["blocks"] == 4
    # llama3-8b geometry: vLLM's objects are a block's head slices (8 KV heads), SGLang's a whole page
    assert out["object_bytes"] == ((2 << 20) // 8 if engine == "vllm" else 2 << 20)
    for figure in ("save_gbps", "load_gbps", "store_put_gbps", "store_get_gbps"):
        assert out[figure] > 0
    assert "save_overhead" in out and "load_overhead" in out


def test_status_shows_the_nodes_tiers_and_counters(tmp_path: Path) -> None:
    """`kvstore status`: a table for people, JSON for scripts, from a running master and a disk node."""
    from kvstore import Store
    from kvstore.procs import kvstore_process

    with kvstore_process(["master", "--port", "0", "--heartbeat-interval", "0.3"]) as (_, ready):
        address = ready.split()[0]
        node = ["node", "--master", address, "--segment-size", "16MiB", "--name", "alpha"]
        node += ["--disk", str(tmp_path / "tier"), "--disk-size", "32MiB"]
        with kvstore_process(node), Store.connect(address) as store:
            store.batch_put_from([f"s{i}" for i in range(20)], [b"v" * 4096] * 20)
            assert store.batch_get(["s1", "missing"]) == [b"v" * 4096, None]
            table = kvstore("status", "--master", address)
            as_json = kvstore("status", "--json", KVSTORE_MASTER=address)
    assert table.returncode == 0, table.stderr
    assert "alpha" in table.stdout and "memory" in table.stdout and "disk" in table.stdout
    assert "hit ratio" in table.stdout and "50.0%" in table.stdout
    status = json.loads(as_json.stdout)
    assert status["master"]["role"] == "single" and status["master"]["address"] == address
    (alpha,) = status["nodes"]
    assert alpha["node"] == alpha["host"] + "/alpha/0"
    tiers = {s["tier"]: s for s in alpha["segments"]}
    assert tiers["memory"]["objects"] == 20 and tiers["memory"]["health"] == "ok"
    assert tiers["disk"]["size"] == (32 << 20) - 4096  # less the page its health probe writes
    assert tiers["disk"]["health"] == "ok"
    assert status["stats"]["objects"] == 20 and status["stats"]["misses"] == 1


def test_status_without_a_master_is_a_clear_error() -> None:
    result = kvstore("status", "--master", "127.0.0.1:1", "--timeout", "1")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "kvstore: error:" in result.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """`kvstore bench master --json | head -1`: a line finds the pipe closed; no traceback. (The reader
    goes before the first line: a reader that takes one line may still be there for the rest.)"""
    args = [sys.executable, "-m", "kvstore.cli", "bench", "master", "--objects", "2000", "--json"]
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 1 and "Traceback" not in err, err
