"""Fencing freed allocations before anything that depends on them being dead goes ahead.

Every replica allocation carries a slot of its node's fence table and a generation (unique, increasing
across master restarts: they start at the wall clock in nanoseconds). Freeing one queues a kill for its
node; the node applies it (transfer_engine kill_allocations: no transfer naming it is admitted again, and
every transfer admitted before has ended) and acknowledges it on its next AwaitWork call. Until then:

- space a writer may still be writing into (a reclaimed or revoked put, a copy destination) stays
  allocated, so a late writer can never overwrite another object;
- a key whose freed replicas readers may still hold in their location caches (a complete object under a
  read lease) is *fencing*: a put of that key is refused as busy and a removal answers only once the kill
  is acknowledged, or once the lease has lapsed (then no cached location is used any more).

A cached read is thus either of a live allocation (its bytes are the key's current value: keys are never
rewritten in place) or refused by the node, never stale bytes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvstore.master.ledger.model import Segment
from kvstore.master.ledger.node_acks import AckWaiters
from kvstore.master.ledger.tombstones import Tombstones


@dataclass(eq=False)
class Kill:
    id: int
    segment: Segment
    slot: int
    gen: int
    held_offset: int | None  # allocator space kept until the node acknowledges (a writer may be late)
    key: str | None  # readers may hold this location: the key is fencing until acknowledged or `until`
    until: float
    buried: int = 0  # the generation its object's removal covers (0: it lives on): the node remembers it


Waiter = Callable[[], None]


class FenceBook:
    def __init__(self, clock: Callable[[], float], wake: Callable[[str], None]) -> None:
        self.clock = clock
        self._wake_node = wake  # answers the node's parked work poll (kvstore.master.ledger.node_polls)
        self._gen = time.time_ns()  # above every generation a previous master incarnation handed out
        self.first = self._gen  # what this master hands out is above it; an earlier one's, at or below
        self._next_kill = 1
        self._queued: dict[str, list[Kill]] = {}  # by the client whose node applies them, not yet sent
        self._sent: dict[str, dict[int, Kill]] = {}  # by client: handed out, not acknowledged yet
        self._fencing: dict[str, list[Kill]] = {}  # key -> kills readers may still race
        self._key_waiters: list[tuple[set[str], Waiter]] = []
        self._acks = AckWaiters(self._lowest, clock)
        self.tombstones = Tombstones()  # what was removed: no restore takes it back (its kills may not land)
        self.held_bytes = 0
        self.kills_sent = 0
        self.kills_acked = 0

    def generation(self) -> int:
        """A new generation (also: every generation handed out so far is below the next one)."""
        self._gen += 1
        return self._gen

    def generations(self, count: int) -> int:
        """`count` new generations in a row; returns the first."""
        first = self._gen + 1
        self._gen += count
        return first

    def observe(self, gen: int) -> None:
        """A node holds an allocation of generation `gen` (from an earlier master, whose clock may have
        run ahead of ours): every generation handed out from now on is above it."""
        self._gen = max(self._gen, gen)

    @property
    def current(self) -> int:
        return self._gen

    # -- freeing --------------------------------------------------------------------------------------
    def kill(
        self, segment: Segment, slot: int, gen: int, held_offset: int | None, key: str | None, until: float
    ) -> Kill:
        buried = self.tombstones.generation(key) if key is not None else 0
        buried = buried if buried >= gen else 0  # (an older removal's: this allocation's object lives on)
        k = Kill(self._next_kill, segment, slot, gen, held_offset, key, until, buried)
        self._next_kill += 1
        self._queued.setdefault(segment.client_id, []).append(k)
        if key is not None and until > self.clock():
            self._fencing.setdefault(key, []).append(k)
        else:
            k.key = None
        self._wake_node(segment.client_id)
        return k

    def queued_since(self, first_id: int) -> dict[str, int]:
        """Per node, the last kill queued for it with an id from `first_id` on (what a removal that
        queued them waits for: when_applied)."""
        marks = {}
        for client_id, queued in self._queued.items():
            if queued and queued[-1].id >= first_id:
                marks[client_id] = queued[-1].id
        return marks

    @property
    def next_id(self) -> int:
        return self._next_kill

    def new_id(self) -> int:
        """An id in the kills' sequence for other work a removal waits for (disk drops): a removal's
        first id marks both (kvstore.master.planners.disk_tier.drops_since)."""
        self._next_kill += 1
        return self._next_kill - 1

    def when_applied(self, marks: dict[str, int], waiter: Waiter, seconds: float) -> bool:
        """False when each node applied every kill up to its mark; else `waiter()` runs once they have
        (or the kills were dropped with their segment) within `seconds`: the nodes forgot what was
        killed."""
        return self._acks.wait(marks, waiter, seconds)

    def _lowest(self, client_id: str) -> int | None:
        """Kills go out oldest first (take), so every one handed out is older than every one queued."""
        sent, queued = self._sent.get(client_id), self._queued.get(client_id)
        if sent:
            return next(iter(sent))
        return queued[0].id if queued else None

    def fencing_any(self) -> bool:
        """Some key is fencing (O(1): a batch of puts checks its keys only then)."""
        return bool(self._fencing)

    def fencing(self, key: str) -> bool:
        return key in self._fencing

    def outstanding(self, client_id: str) -> bool:
        """Kills for this client's node not acknowledged yet."""
        return bool(self._queued.get(client_id)) or bool(self._sent.get(client_id))

    def unacknowledged(self) -> list[Kill]:
        """Every kill not acknowledged yet, handed out or queued (what a replay of the records rebuilds)."""
        kills = [k for sent in self._sent.values() for k in sent.values()]
        return kills + [k for queued in self._queued.values() for k in queued]

    def fencing_keys(self) -> set[str]:
        return set(self._fencing)

    # -- the node's side ------------------------------------------------------------------------------
    def take(self, client_id: str, limit: int) -> list[Kill]:
        """At most `limit` kills for this client's node to apply: first those handed out before and not
        acknowledged (each is handed out again until it is), then queued ones. Bounded, so the node's
        acknowledgement of them fits one request (AwaitWork's bound)."""
        sent = self._sent.setdefault(client_id, {})
        out = list(itertools.islice(sent.values(), limit))
        queued = self._queued.get(client_id)
        if queued and len(out) < limit:
            fresh = queued[: limit - len(out)]
            del queued[: len(fresh)]
            for k in fresh:
                sent[k.id] = k
            self.kills_sent += len(fresh)
            out += fresh
        return out

    def acknowledge(self, client_id: str, ids: Iterable[int]) -> list[Kill]:
        """The node applied these kills: returns them (the caller frees held space) and lifts fencing."""
        done = []
        sent = self._sent.get(client_id, {})
        for i in ids:
            k = sent.pop(i, None)
            if k is None:
                continue
            done.append(k)
            self._settle(k)
        self.kills_acked += len(done)
        self._acks.check(client_id)
        return done

    def settle_named(self, client_id: str, named: Iterable[tuple[int, int, int]]) -> list[Kill]:
        """A replayed FencesAcknowledged: the kills of these (segment id, slot, generation), handed out
        or still queued (a replay hands nothing out), were applied; returns them, as acknowledge does."""
        wanted = set(named)
        sent = self._sent.get(client_id, {})
        done = [k for k in sent.values() if (k.segment.id, k.slot, k.gen) in wanted]
        for k in done:
            del sent[k.id]
        queued = self._queued.get(client_id)
        if queued:
            done += [k for k in queued if (k.segment.id, k.slot, k.gen) in wanted]
            self._queued[client_id] = [k for k in queued if (k.segment.id, k.slot, k.gen) not in wanted]
        for k in done:
            self._settle(k)
        self.kills_acked += len(done)
        self._acks.check(client_id)
        return done

    # -- waiting for keys -----------------------------------------------------------------------------
    def when_settled(self, keys: Iterable[str], waiter: Waiter) -> bool:
        """False when none of `keys` is fencing; else `waiter()` runs once all have settled."""
        pending = {k for k in keys if k in self._fencing}
        if not pending:
            return False
        self._key_waiters.append((pending, waiter))
        return True

    def expire(self) -> None:
        """Lifts fencing whose read leases have lapsed (a node that never answers cannot hold a key)."""
        now = self.clock()
        for kills in list(self._fencing.values()):
            for k in [k for k in kills if k.until <= now]:
                self._settle(k)

    def drop_segment(self, segment: Segment) -> None:
        """The segment is gone: its kills need no node (nothing of it can be read or written again)."""
        queued = self._queued.get(segment.client_id)
        if queued:
            self._queued[segment.client_id] = [k for k in queued if k.segment is not segment]
        sent = self._sent.get(segment.client_id, {})
        for k in [k for k in sent.values() if k.segment is segment]:
            del sent[k.id]
        for kills in list(self._fencing.values()):
            for k in [k for k in kills if k.segment is segment]:
                self._settle(k)
        self._acks.check(segment.client_id)

    def _settle(self, k: Kill) -> None:
        if k.key is None:
            return
        kills = self._fencing.get(k.key)
        if kills is not None and k in kills:
            kills.remove(k)
            if not kills:
                del self._fencing[k.key]
                self._wake(k.key)
        k.key = None

    def _wake(self, key: str) -> None:
        still = []
        for pending, waiter in self._key_waiters:
            pending.discard(key)
            if pending:
                still.append((pending, waiter))
            else:
                waiter()
        self._key_waiters = still

    def stats(self) -> dict[str, int]:
        return {
            "fence_kills_sent": self.kills_sent,
            "fence_kills_acked": self.kills_acked,
            "fence_kills_outstanding": sum(len(s) for s in self._sent.values())
            + sum(len(q) for q in self._queued.values()),
            "fencing_keys": len(self._fencing),
            "fence_held_bytes": self.held_bytes,
            **self.tombstones.stats(),
        }
