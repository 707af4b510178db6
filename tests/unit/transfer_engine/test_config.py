from __future__ import annotations

import pytest

from transfer_engine import EngineConfig, InvalidArgumentError
from transfer_engine.units import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("4KiB", 4096),
        ("1MiB", 1 << 20),
        ("1MB", 10**6),
        ("4GiB", 4 << 30),
        ("512k", 512 << 10),
        (" 2 GiB ", 2 << 30),
        (123, 123),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "abc", "4XB", "-1", "1.5.2MiB", True, -5])
def test_parse_size_rejects(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_size(bad)  # type: ignore[arg-type]


def test_format_size() -> None:
    assert format_size(1 << 20) == "1MiB"
    assert format_size(4 << 30) == "4GiB"
    assert format_size(1000) == "1000B"


def test_env_then_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSTORE_TRANSPORT", "tcp")
    monkeypatch.setenv("KVSTORE_TCP_SLICE_SIZE", "256KiB")
    monkeypatch.setenv("KVSTORE_SHM_ENABLED", "false")
    monkeypatch.setenv("KVSTORE_TCP_IO_TIMEOUT", "2.5")
    config = EngineConfig.load(tcp_connections=4)
    tcp = config.transport_settings("tcp")
    assert config.transport == "tcp"
    assert tcp["slice_size"] == 256 << 10
    assert config.transport_settings("shm")["enabled"] is False
    assert tcp["connections"] == 4
    assert tcp["io_timeout"] == 2.5
    assert config.origin("transport").variable == "KVSTORE_TRANSPORT"
    assert config.origin("tcp_connections").source == "code"
    assert config.origin("copy_threads").source == "default"
    assert config.to_core()["transport_options"]["tcp"]["io_timeout"] == 2500  # milliseconds in C++
    assert EngineConfig.load(transport="local").transport == "local"  # code beats environment


def test_transports_come_from_the_registration_list() -> None:
    from transfer_engine import _core
    from transfer_engine.config import transport_choices

    names = [t["name"] for t in _core.transports()]
    assert names == ["local", "shm", "tcp", "cuda_ipc", "ucx"]
    assert transport_choices() == ("auto", *names)
    settings = {s.variable for s in EngineConfig.settings()}
    for t in _core.transports():
        for option in t["options"]:
            assert f"KVSTORE_{t['name'].upper()}_{option['name'].upper()}" in settings


@pytest.mark.parametrize(
    "overrides",
    [
        {"transport": "rdma"},
        {"port": 70000},
        {"tcp_connections": 0},
        {"tcp_slice_size": "1KiB"},
        {"copy_threads": 0},
        {"transfer_timeout": 0},
        {"no_such_setting": 1},
        {"shm_enabled": "maybe"},
        {"tcp_io_timeout": "soon"},
        {"transport": "shm", "shm_enabled": False},
        {"tcp_socket_buffer": 2**64},
    ],
)
def test_invalid_config(overrides: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        EngineConfig.load(**overrides)


def test_invalid_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSTORE_TCP_CONNECTIONS", "many")
    with pytest.raises(InvalidArgumentError, match="KVSTORE_TCP_CONNECTIONS"):
        EngineConfig.load()


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_refused(raw: str) -> None:
    with pytest.raises(InvalidArgumentError, match="transfer_timeout"):
        EngineConfig.load(transfer_timeout=raw)
