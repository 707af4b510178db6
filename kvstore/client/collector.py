"""The garbage collector held off during a batch call.

A batch of 1,000 keys makes ~10 container objects a key that live until the call returns: with the
collector on, each batch ran a dozen young collections, which walked and promoted those live objects,
and now and then a full one over the whole heap of the engine embedding the client (28% of a 1 KiB put
batch's time here). Nothing a batch makes is cyclic garbage that must go at once: the collector runs
again when the outermost batch call returns. A process that turned the collector off keeps it off.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_inside = 0  # batch calls running (several threads may be in one)
_paused = False  # whether the outermost one turned the collector off (it was on)


def _enter() -> None:
    global _inside, _paused
    with _lock:
        if _inside == 0 and gc.isenabled():
            gc.disable()
            _paused = True
        _inside += 1


def _leave() -> None:
    global _inside, _paused
    with _lock:
        _inside -= 1
        if _inside == 0 and _paused:
            _paused = False
            gc.enable()


def collector_paused(fn: F) -> F:
    """Runs `fn` with the collector off (see the module's doc)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        _enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _leave()

    return call  # type: ignore[return-value]
