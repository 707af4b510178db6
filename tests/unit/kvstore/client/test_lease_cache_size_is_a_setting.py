"""The lease cache's bound is the client's setting lease_cache_entries (KVSTORE_LEASE_CACHE_ENTRIES): the
environment's value reaches the cache a Store builds and bounds what it keeps; a bad one is refused
before anything is built; `kvstore config` lists it."""

from __future__ import annotations

import pytest

from kvstore import Store
from kvstore.config import StoreConfig
from kvstore.errors import InvalidArgumentError


def test_the_environment_sets_the_bound_of_the_cache_a_store_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSTORE_LEASE_CACHE_ENTRIES", "3")
    with Store.embedded("16MiB") as store:
        assert store.leases.max_entries == 3
        keys = [f"k{i}" for i in range(5)]
        for key in keys:
            store.put(key, key.encode() * 10)
        for key in keys:
            assert store.get(key) == key.encode() * 10  # each located once, its lease cached
        assert len(store.leases) == 3
        assert [e is not None for e in store.leases.lookup(keys)] == [False, False, True, True, True]


def test_a_store_without_the_variable_gets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVSTORE_LEASE_CACHE_ENTRIES", raising=False)
    with Store.embedded("16MiB") as store:
        assert store.leases.max_entries == StoreConfig().lease_cache_entries == 1 << 18


@pytest.mark.parametrize("bad", ["0", "-5", "many", str((1 << 30) + 1)])
def test_a_bad_bound_is_refused_with_a_clear_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("KVSTORE_LEASE_CACHE_ENTRIES", bad)
    with pytest.raises(InvalidArgumentError, match="lease_cache_entries"):
        StoreConfig.load()


def test_kvstore_config_lists_it() -> None:
    (info,) = [s for s in StoreConfig.settings() if s.name == "lease_cache_entries"]
    assert info.variable == "KVSTORE_LEASE_CACHE_ENTRIES" and info.kind == "int" and "0.75 KiB" in info.doc
