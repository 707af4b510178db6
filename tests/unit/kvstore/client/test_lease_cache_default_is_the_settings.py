"""A LeaseCache built without a bound has the client setting's default (StoreConfig.lease_cache_entries):
one default, not two that drift apart (it was 65,536 here against the setting's 262,144)."""

from __future__ import annotations

import dataclasses

from kvstore.client.lease_cache import LeaseCache
from kvstore.config import StoreConfig


def test_a_cache_without_a_bound_has_the_settings_default() -> None:
    setting = next(f for f in dataclasses.fields(StoreConfig) if f.name == "lease_cache_entries")
    assert LeaseCache(5.0).max_entries == setting.default == 1 << 18
