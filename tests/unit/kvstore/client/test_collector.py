"""Batch calls hold the garbage collector off while they run, and give it back as they found it."""

from __future__ import annotations

import gc
import threading

import pytest

from kvstore.client.collector import collector_paused


def test_the_collector_is_off_inside_and_back_on_after_even_when_the_call_raises() -> None:
    seen = []

    @collector_paused
    def inner() -> None:
        seen.append(gc.isenabled())

    @collector_paused
    def outer(fail: bool) -> None:
        inner()
        seen.append(gc.isenabled())
        if fail:
            raise ValueError

    assert gc.isenabled()
    outer(False)
    with pytest.raises(ValueError):
        outer(True)
    assert seen == [False, False, False, False] and gc.isenabled()


def test_a_process_that_turned_it_off_keeps_it_off() -> None:
    gc.disable()
    try:
        collector_paused(lambda: None)()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_threads_in_batch_calls_at_once_leave_it_on_when_the_last_returns() -> None:
    inside, release = threading.Barrier(4), threading.Event()

    @collector_paused
    def call() -> None:
        inside.wait()
        release.wait()

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()
