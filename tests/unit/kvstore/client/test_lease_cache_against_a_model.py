"""The lease cache against a plain model of what a lease promises, over random runs of fills (found,
absent, granted late), lookups, drops, clears, heartbeats and the clock moving on (hypothesis):
- sound: an entry it returns is the latest one filled for that key, and half its lease has not passed;
- complete: an entry is returned while its lease lasts unless max_entries other keys were filled since
  (oldest fill evicted first; a drop of an expired entry frees room, never a live one);
- bounded: it never holds more than max_entries entries."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from kvstore.client.lease_cache import LeaseCache

KEYS = [f"ns/0x{i:016x}" for i in range(5)]  # few: refills and evictions are common
LEASE_TTL = 10.0  # entries valid 5 s from their grant


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Model:
    """Per key the latest entry filled and its expiry (None once absent, dropped or cleared), and every
    key stored, in fill order."""

    latest: dict[str, tuple[float, int] | None] = field(default_factory=dict)
    stored: list[str] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)  # key -> its latest fill's index in `stored`

    def fill(self, key: str, value: int | None, expiry: float, now: float) -> None:
        if value is None or expiry <= now:
            self.latest[key] = None
            return
        self.latest[key] = (expiry, value)
        self.at[key] = len(self.stored)
        self.stored.append(key)

    def valid(self, key: str, now: float) -> int | None:
        held = self.latest.get(key)
        return held[1] if held is not None and held[0] > now else None

    def filled_since(self, key: str) -> int:
        """Other keys stored after this key's latest fill: the most that could have pushed it out."""
        return len(set(self.stored[self.at[key] + 1 :]) - {key})


fills = st.tuples(
    st.just("fill"),
    st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from([True, True, True, False])), min_size=1, max_size=5
    ),
    st.sampled_from([0.0, 0.0, 0.0, 1.0, 4.0, 4.5, 5.0, 6.0]),  # how long before now the lease was granted
)
lookups = st.tuples(st.just("lookup"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=5))
ops = st.one_of(  # fills and lookups twice as likely as the rest
    fills,
    lookups,
    fills,
    lookups,
    st.tuples(st.just("drop"), st.lists(st.sampled_from(KEYS), max_size=3)),
    st.tuples(st.just("clear")),
    st.tuples(st.just("heartbeat")),
    st.tuples(st.just("wait"), st.sampled_from([0.25, 0.5, 1.0, 2.0, 5.0])),  # to and past expiries
)


@settings(max_examples=800, deadline=None)
@given(max_entries=st.integers(min_value=1, max_value=3), run=st.lists(ops, max_size=60))
def test_the_cache_keeps_a_leases_promise(max_entries: int, run: list[tuple]) -> None:
    clock = Clock()
    cache = LeaseCache(LEASE_TTL, max_entries=max_entries, clock=clock)
    model = Model()
    serial = 0
    for op in run:
        if op[0] == "fill":
            _, items, lag = op
            keys, values = [], []
            for key, found in items:
                serial += 1
                keys.append(key)
                values.append(serial if found else None)
                model.fill(key, values[-1], clock.now - lag + LEASE_TTL / 2, clock.now)
            cache.fill(keys, values, granted_at=clock.now - lag)
        elif op[0] == "lookup":
            check(cache, model, clock.now, max_entries, op[1])
        elif op[0] == "drop":
            cache.drop(op[1])
            for key in op[1]:
                model.latest[key] = None
        elif op[0] == "clear":
            cache.clear()
            model.latest.clear()
        elif op[0] == "heartbeat":
            cache.take_touches()
        else:
            clock.now += op[1]
        assert len(cache) <= max_entries
    check(cache, model, clock.now, max_entries, KEYS)


def check(cache: LeaseCache, model: Model, now: float, max_entries: int, keys: list[str]) -> None:
    for key, got in zip(keys, cache.lookup(keys), strict=True):
        expected = model.valid(key, now)
        if got is not None:
            assert got == expected, f"{key}: returned {got}, the valid entry is {expected}"
        elif expected is not None:
            assert model.filled_since(key) >= max_entries, f"{key}: {expected} lost while valid"
