"""A master's shard and shard count are settings like its others (review43 F4): KVSTORE_MASTER_SHARD and
KVSTORE_MASTER_SHARDS set them (a systemd unit's env file can run a shard's master), --shard/--shards beat
them, and a pair that is no shard of a cluster is refused naming the settings, in code, environment and
on the command line; a real master started from the variables alone serves that shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from kvstore import cli
from kvstore.config import MasterConfig
from kvstore.errors import InvalidArgumentError
from tests.e2e.test_servers_and_config import server


def master_from(argv: list[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> MasterConfig:
    """The config `kvstore master ARGV` runs with, given `env` (as cli._run_master loads it)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    args = cli.build_parser()[0].parse_args(["master", *argv])
    return MasterConfig.load(**cli._given(args, cli._MASTER_FLAGS))


def test_the_variables_set_the_shard_and_the_options_beat_them(monkeypatch: pytest.MonkeyPatch) -> None:
    assert master_from([], monkeypatch).shard_of == (0, 1)
    config = master_from([], monkeypatch, KVSTORE_MASTER_SHARD="2", KVSTORE_MASTER_SHARDS="3")
    assert config.shard_of == (2, 3)
    assert [str(config.origin(n)) for n in ("shard", "shards")] == [
        "environment KVSTORE_MASTER_SHARD",
        "environment KVSTORE_MASTER_SHARDS",
    ]
    assert master_from(["--shard", "0"], monkeypatch).shard_of == (0, 3)


@pytest.mark.parametrize("shard, shards", [(1, 1), (2, 2), (0, 0), (0, 257), (-1, 2), (256, 256)])
def test_a_pair_that_is_no_shard_is_refused_naming_the_settings(shard: int, shards: int) -> None:
    with pytest.raises(InvalidArgumentError, match="KVSTORE_MASTER_SHARD"):
        MasterConfig.load({}, shard=shard, shards=shards)
    env = {"KVSTORE_MASTER_SHARD": str(shard), "KVSTORE_MASTER_SHARDS": str(shards)}
    with pytest.raises(InvalidArgumentError, match="KVSTORE_MASTER_SHARD"):
        MasterConfig.load(env)


@pytest.mark.parametrize("value", ["x", "1.5", ""])
def test_a_shard_variable_that_is_no_number_is_named(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match="KVSTORE_MASTER_SHARD"):
        MasterConfig.load({"KVSTORE_MASTER_SHARD": value})


def test_a_master_serves_the_shard_its_variables_name() -> None:
    env = {"KVSTORE_MASTER_SHARD": "1", "KVSTORE_MASTER_SHARDS": "2"}
    with server("master", "--port", "0", "--http-port", "0", **env) as (_, ready):
        http = ready.split("http=")[1]
        with urllib.request.urlopen(f"http://{http}/health", timeout=30) as reply:
            health = json.load(reply)
    assert (health["shard"], health["shards"]) == (1, 2), health


def test_a_master_given_no_shard_of_its_count_says_so_in_one_line() -> None:
    env = {"KVSTORE_MASTER_SHARD": "2", "KVSTORE_MASTER_SHARDS": "2"}
    ran = subprocess.run(
        [sys.executable, "-m", "kvstore.cli", "master", "--port", "0"],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode != 0 and "READY" not in ran.stdout
    (line,) = [x for x in ran.stderr.splitlines() if x.strip()]
    assert "KVSTORE_MASTER_SHARD" in line and "shard 2 of 2" in line, ran.stderr
