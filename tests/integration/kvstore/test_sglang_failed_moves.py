"""SGLang backend: what a get or set the store fails costs (kvstore.integrations.sglang's _load / _save, one
guard for both). A store error is a miss for every page of the call, logged and, for loads, counted as
failed pages; pages that do not fit SGLang's own host pool are an error, not a miss. Real store and master
processes; SGLang's interface names from the stand-in packages, as in test_engine_connectors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from kvstore import Store
from kvstore.errors import InvalidArgumentError
from tests.integration.kvstore.test_engine_connectors import PAGE, MHAPool, engines, sglang_backend

__all__ = ["engines"]  # the fixture, used by name

KEYS = [f"{i:064x}" for i in range(1, 3)]
INDICES = np.arange(len(KEYS) * PAGE)


def test_a_store_that_fails_costs_misses_that_are_logged_and_counted(
    engines: None, caplog: pytest.LogCaptureFixture
) -> None:
    with Store.embedded(segment_size="64MiB") as store:
        backend = sglang_backend(store.master_address, MHAPool(1), namespace="sglang-failed-moves")
        assert backend.batch_set_v1(KEYS, INDICES) == [True, True]
    # The master is gone (its cluster closed): every call fails in the store.
    with caplog.at_level(logging.WARNING, logger="kvstore.sglang"):
        assert backend.batch_get_v1(KEYS, INDICES) == [False, False]
        assert backend.batch_set_v1(KEYS, INDICES) == [False, False]
    assert "kvstore get of 2 pages failed" in caplog.text
    assert "kvstore set of 2 pages failed" in caplog.text
    assert backend.stats["failed_pages"] == 2 and backend.stats["loaded_pages"] == 0
    assert backend.stats["saved_pages"] == 2  # the first set only


def test_pages_outside_the_host_pool_are_an_error_not_a_miss(engines: None) -> None:
    with Store.embedded(segment_size="64MiB") as store:
        backend = sglang_backend(store.master_address, MHAPool(1), namespace="sglang-outside-pool")
        assert backend.batch_set_v1(KEYS, INDICES) == [True, True]
        outside = np.arange(10**6, 10**6 + len(KEYS) * PAGE)
        with pytest.raises(InvalidArgumentError):
            backend.batch_get_v1(KEYS, outside)
        with pytest.raises(InvalidArgumentError):
            backend.batch_set_v1([f"{9:064x}"], outside[:PAGE])
        assert backend.stats["failed_pages"] == 0
