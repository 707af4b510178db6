"""A single get into registered memory is read in the engine's one-call path straight from the batch's
first round (kvstore.client.read_plan.plan_one): no replica rounds, no batch columns. What does not verify
still goes through the rounds (read again, reported, the buffer cleared, a miss), and any other single
get (an unregistered buffer, several pieces, a deadline) reads as before. A real embedded store (master
and segment in this process) reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from kvstore import Store
from kvstore.client.read_batch import MISS, ReadBatch
from kvstore.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with Store.embedded("64MiB") as store:
        yield store


class Counted:
    """Calls through to `fn` (the real one), counting them."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.fn(*args, **kwargs)


def _counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> Counted:
    counted = Counted(getattr(owner, name))
    monkeypatch.setattr(owner, name, counted)
    return counted


def _registered(store: Store, nbytes: int) -> np.ndarray:
    buffer = np.zeros(nbytes, np.uint8)
    store.register_buffer(buffer)
    return buffer


def test_a_single_get_is_one_engine_call_and_no_rounds(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    value = np.random.default_rng(1).integers(0, 256, 300_000, dtype=np.uint8)
    assert store.batch_put_from(["one-call/a"], [value]) == [0]
    out = _registered(store, 300_000)
    one = _counted(monkeypatch, store.engine, "read_one_verified")
    submit = _counted(monkeypatch, store.engine, "submit")
    rounds = Counted(ReadBatch._from_replicas)
    monkeypatch.setattr(ReadBatch, "_from_replicas", lambda self, *a: rounds(self, *a))
    hits = store.stats_local.hits
    for _ in range(3):
        store.leases.clear()  # (uncached: located by the master each time)
        out[:] = 0
        assert store.get_into("one-call/a", out) == value.nbytes
        assert np.array_equal(out, value)
    assert store.get_into("one-call/a", out) == value.nbytes  # (and from the lease cache)
    assert (one.calls, submit.calls, rounds.calls) == (4, 0, 0)
    assert store.stats_local.hits == hits + 4


def test_a_larger_buffer_takes_the_value_and_a_smaller_one_is_refused(store: Store) -> None:
    value = np.arange(5000, dtype=np.uint16).view(np.uint8)
    assert store.batch_put_from(["one-call/sizes"], [value]) == [0]
    larger = _registered(store, value.nbytes + 4096)
    larger[:] = 7
    assert store.get_into("one-call/sizes", larger) == value.nbytes
    assert np.array_equal(larger[: value.nbytes], value) and (larger[value.nbytes :] == 7).all()
    smaller = _registered(store, value.nbytes - 1)
    assert store.get_into("one-call/sizes", smaller) == -InvalidArgumentError.code


def test_a_read_that_does_not_verify_is_a_miss_with_its_buffer_cleared(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = np.full(8192, 3, np.uint8)
    assert store.batch_put_from(["one-call/bad"], [value]) == [0]
    store.leases.clear()
    found, cached = store.locator.locate(["one-call/bad"])
    wrong = found[0]._replace(checksum=found[0].checksum ^ 1)  # (what a replica changed since would hash to)
    reported = _counted(monkeypatch, store.reports, "report")
    mismatches = store.stats_local.checksum_mismatches
    out = _registered(store, 8192)
    assert store.reads.get_into(["one-call/bad"], [[out]], [wrong], cached) == [MISS]
    assert not out.any()  # no byte of the failed reads left in the caller's buffer
    assert store.stats_local.checksum_mismatches == mismatches + 1  # (read again by the rounds, reported)
    assert reported.calls == 1


def test_other_single_gets_read_as_before(store: Store) -> None:
    value = np.random.default_rng(2).integers(0, 256, 70_000, dtype=np.uint8)
    assert store.batch_put_from(["one-call/other"], [value]) == [0]
    unregistered = np.zeros(70_000, np.uint8)
    store.leases.clear()
    assert store.get_into("one-call/other", unregistered) == value.nbytes
    assert np.array_equal(unregistered, value)
    halves = [_registered(store, 35_000), _registered(store, 35_000)]
    store.leases.clear()
    assert store.batch_get_into_multi_buffers(["one-call/other"], [halves]) == [value.nbytes]
    assert np.array_equal(np.concatenate(halves), value)
    out = _registered(store, 70_000)
    store.leases.clear()
    assert store.batch_get_into(["one-call/other"], [out], deadline=5.0) == [value.nbytes]
    assert np.array_equal(out, value)
    assert store.get_into("one-call/absent", out) == MISS
