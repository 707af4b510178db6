"""Two-phase puts: start (check limits, place the replicas, evicting for room; tell the nodes while the
client writes), end (commit a batch in one ledger record) or revoke."""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import cast

from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    NoSpaceError,
    NotFoundError,
    ObjectBusyError,
    ObjectExistsError,
    TooManyPutsError,
)
from kvstore.master.ledger.changes import PutsStarted
from kvstore.master.ledger.ledger import Carved
from kvstore.master.ledger.model import Client, Replica
from kvstore.master.ledger.objects import ObjectMeta
from kvstore.master.planners.victims import RoomComing
from kvstore.master.service.batches import first_repeat, first_where
from kvstore.master.service.removal import Removal
from kvstore.master.service.state_core import StateCore
from kvstore.rpc.messages import PutItem
from kvstore.rpc.put_items import PutColumns

# A put's outcome: its replicas, None (stored already), its error, or (in StartedOutcomes) an int naming its
# copies among the request's placed columns.
Outcome = list[Replica] | KVStoreError | None | int
RUN_LEAST, MAX_RUN = 16, 4096  # the fewest items a run after the first looks at; the most any looks at


class Puts:
    """Puts from start to end: the puts in progress are the core's (PutsInProgress), and they evict for
    room through `removal`."""

    def __init__(self, core: StateCore, removal: Removal, client: Callable[[str], Client]) -> None:
        """`core`: the tables and primitives it works on; `client(id)`: the registered writer, or
        NotFoundError (kvstore.master.service.membership)."""
        self.config, self.clock, self.counters = core.config, core.clock, core.counters
        self.objects, self.ledger, self.space, self.disk = core.objects, core.ledger, core.space, core.disk
        self.policy, self.replicator, self._pending = core.policy, core.replicator, core.pending
        self._delete, self.plan_demotions = core.delete, core.plan_demotions
        self._evict_one = removal.evict_one
        self._client = client

    def start_puts(
        self,
        client_id: str,
        items: Sequence[PutItem],
        replicas: int,
        pin: bool,
        min_replicas: int,
        wait_for_room: bool,
        out: list[Outcome],
    ) -> None:
        """put_start of each PutItem (key, size, checksum) of `items` from len(out) on, appending to `out` its
        replicas, None (already stored), or its error: one bad item fails alone. The ledger records the
        started ones a run at a time (PutsStarted). Raises RoomComing at an item that waits for room
        (those before it are in `out` and recorded: call again to go on from it)."""
        self._client(client_id)  # only registered clients may write: the request fails, not each item
        items = PutColumns.of(items)  # (runs slice the columns)
        # Items a run looks at: all of them at first (a batch of new puts is one run: each run costs ~20-40 us
        # however few it takes), then twice the last run's, halved by a run that took none, so a batch whose
        # plain puts are few and scattered costs O(items), not O(items^2).
        window = MAX_RUN
        while len(out) < len(items):
            taken = self._start_run(client_id, items, window, replicas, pin, min_replicas, wait_for_room, out)
            if taken:
                window = min(max(RUN_LEAST, 2 * taken), MAX_RUN)
                continue
            window = max(RUN_LEAST, window // 2)
            item = items[len(out)]  # one at a time: it fails, waits or evicts
            try:
                out.append(self._start(client_id, replicas, pin, min_replicas, wait_for_room, item))
            except KVStoreError as exc:
                out.append(exc)

    def _start_run(
        self,
        client_id: str,
        items: PutColumns,
        window: int,
        replicas: int,
        pin: bool,
        min_replicas: int,
        wait_for_room: bool,
        out: list[Outcome],
    ) -> int:
        """Starts the run of items from len(out) on (at most `window`) that are new puts within the
        client's limits (keys neither stored, started nor fencing): one placement call for those that
        fit now, evicting for the rest one by one (RoomComing as _place raises it), and one record.
        Appends each one's replicas or error to `out`; returns how many. 0 when the first item is not
        one of those: _start takes it alone. Each item ends as it would in _start."""
        if not 1 <= replicas <= self.config.max_replicas:
            return 0
        at = len(out)
        if items.keys[at] in self.ledger.objects:  # (the usual re-put of a stored key: cheap)
            return 0
        keys, sizes = items.keys[at : at + window], items.sizes[at : at + window]
        count = replicas
        if 0 < min_replicas < replicas:  # as many as usable segments allow: one count for the run
            count = max(min_replicas, min(replicas, self.space.usable_for(max(sizes))))
            if count != max(min_replicas, min(replicas, self.space.usable_for(min(sizes)))):
                return 0
        n = min(len(keys), self._within_limits(client_id, sizes, count))
        n = self.ledger.objects.table.first_present(keys[:n])  # (started ones too: their rows exist)
        fences = self.space.fences
        if fences.fencing_any():
            n = first_where(keys, n, fences.fencing)
        n = first_repeat(keys, n)  # a key twice: the second is a put in progress (_start says so)
        if n == 0:
            return 0
        try:
            self.space.check_fits(max(sizes[:n]), count)
        except KVStoreError:
            return 0
        run = _Started(count)
        checksums = items.checksums[at : at + window]
        if isinstance(out, StartedOutcomes):  # the caller encodes them in C++: columns, no Replica per copy
            carved = self.ledger.carve_many(keys[:n], sizes[:n], count)
            run.carved(keys, sizes, checksums, carved)
            out.extend(out.placed.extend(carved, count))
        else:
            carved = self.space.place_many(keys[:n], sizes[:n], count)
            run.carved(keys, sizes, checksums, carved)
            copies = carved.replicas
            out.extend([copies[i : i + count] for i in range(0, len(copies), count)])
        now = self.clock()
        try:
            for i in range(len(run.keys), n):  # no room for these now: evict for each (or wait), as _start
                try:
                    copies = self._place(keys[i], sizes[i], count, wait_for_room)
                except KVStoreError as exc:
                    out.append(exc)
                    continue
                run.add(keys[i], sizes[i], checksums[i], copies)
                out.append(copies)
        finally:  # (a RoomComing above leaves those before it started: held and recorded)
            self._record_started(client_id, run, pin, replicas, now)
        return n

    def _within_limits(self, client_id: str, sizes: list[int], count: int) -> int:
        """How many of the next puts of `sizes` (`count` replicas each) _check_put_limits lets through."""
        objects, held = self._pending.held(client_id)
        most_objects, most_bytes = self._put_limits()
        room = bisect.bisect_right(list(itertools.accumulate(sizes)), (most_bytes - held) // count)
        fits = min(most_objects - objects, room)
        return max(fits, 1 if objects == 0 else 0)  # a client with none in progress may start one

    def _record_started(self, client_id: str, run: _Started, pin: bool, asked: int, now: float) -> None:
        """The ledger records the run's puts (one PutsStarted), then their nodes are told of the replicas
        (holds, by the new rows: no object per key), while the client writes them."""
        if not run.keys:
            return
        refs = self.ledger.start_puts(run.record(client_id, pin, asked, now, now + self.config.put_timeout))
        self.space.holds.hold_rows(refs)  # (sets each row's hold_seq)

    def put_start(
        self,
        client_id: str,
        key: str,
        size: int,
        checksum: int,
        replicas: int,
        pin: bool,
        min_replicas: int = 0,
        wait_for_room: bool = False,
    ) -> list[Replica] | None:
        """Allocates replicas for a new object; None when the same bytes are already stored. With
        `min_replicas`, fewer than `replicas` (not below it) are placed when fewer distinct segments are
        usable: the caller sees how many in the placement. With `wait_for_room`, raises RoomComing
        (nothing placed) rather than evict for room that is on its way. The nodes are told of the
        replicas at once, while the client writes them (kvstore.master.ledger.holds)."""
        out: list[Outcome] = []  # (a plain list: a placed put's outcome is its replicas)
        item = PutItem(key=key, size=size, checksum=checksum)
        self.start_puts(client_id, [item], replicas, pin, min_replicas, wait_for_room, out)
        (placed,) = out
        if isinstance(placed, KVStoreError):
            raise placed
        return cast(list[Replica] | None, placed)

    def _start(
        self,
        client_id: str,
        replicas: int,
        pin: bool,
        min_replicas: int,
        wait_for_room: bool,
        item: PutItem,
    ) -> list[Replica] | None:
        """put_start's body; the ledger records the put (PutsStarted of it alone)."""
        key, size, checksum = item.key, item.size, item.checksum
        if not 1 <= replicas <= self.config.max_replicas:
            raise InvalidArgumentError(f"replicas must be 1..{self.config.max_replicas}")
        existing = self.objects.get(key)
        if existing is None and self.space.fences.fencing(key):
            raise ObjectBusyError(f"{key!r} was just removed; its old replicas are being fenced off, retry")
        if existing is not None:
            if not existing.complete:
                raise ObjectBusyError(f"a put of {key!r} is in progress")
            if existing.size == size and existing.checksum == checksum:
                self.policy.on_access(key)  # offered again: a use, as far as eviction is concerned
                return None  # same key, same bytes: nothing to write
            raise ObjectExistsError(f"{key!r} already holds a different value; remove it first")
        asked = replicas
        if 0 < min_replicas < replicas:
            replicas = max(min_replicas, min(replicas, self.space.usable_for(size)))
        self._check_put_limits(client_id, size * replicas)  # before placing: nothing evicted for it
        placed = self._place(key, size, replicas, wait_for_room)
        run = _Started(len(placed))
        run.add(key, size, checksum, placed)
        # base_replicas is what was asked: a degraded object is repaired up to it when read (replicator)
        self._record_started(client_id, run, pin, asked, self.clock())
        return placed

    def put_end(self, client_id: str, key: str, plan: bool = True) -> None:
        """Makes the put visible (NotFoundError when no put of it by this client is in progress)."""
        (error,) = self.put_end_many(client_id, [key], plan)
        if error is not None:
            raise error

    def put_end_many(self, client_id: str, keys: list[str], plan: bool = True) -> list[NotFoundError | None]:
        """Makes the puts visible: per key None, or the error (no put of it by this client in progress)."""
        return self.commit_puts(client_id, keys, plan)[0]

    def commit_puts(
        self, client_id: str, keys: list[str], plan: bool = True
    ) -> tuple[list[NotFoundError | None], dict[str, int]]:
        """Makes the puts visible: per key None, or the error (no put of it by this client in progress).
        The ledger commits them in one batch. Also returns, per node of their replicas, the hold its
        acknowledgements must reach for it to hold them all (HoldBook.when_held: the master can lose
        them only until then). `plan`: plan demotions once, after the last (planning walks the coldest
        part of memory)."""
        inserting = self.policy.insert_last()  # (the policy's insertion in the commit's crossing)
        ended = self.ledger.end_puts(client_id, keys, *(inserting or (-1, 0)))
        errors: list[NotFoundError | None] = [None] * len(keys)
        for i in ended.missing:
            errors[i] = NotFoundError(f"no put of {keys[i]!r} in progress by this client")
        # The nodes of their replicas now (a hold on one whose segment was lost since is cancelled, which
        # when_held counts as acknowledged); the table gives the marks by segment.
        marks: dict[str, int] = {}
        segments = self.ledger.objects.segments
        for segment_id, seq in ended.marks.items():
            node = segments[segment_id].client_id
            if marks.get(node, 0) < seq:
                marks[node] = seq
        if ended.ended:
            self.replicator.touched.update(ended.short_of_copies)  # the next plan adds copies where room is
            if inserting is None:
                self.policy.on_insert_many(ended.ended)
            else:
                self.policy.on_inserted(ended.sampled)
            self.counters.puts += len(ended.ended)
            self.counters.put_bytes += ended.bytes
        if plan and self.disk.segments:  # puts push the coldest objects toward eviction: give them records
            self.plan_demotions()
        return errors, marks

    def put_revoke(self, client_id: str, key: str) -> None:
        self._delete(self._pending_put(client_id, key))

    def _check_put_limits(self, client_id: str, nbytes: int) -> None:
        """TooManyPutsError when this client's puts in progress are at its limits: objects (at most half
        of all fence slots, whatever the setting) or bytes (a client with none in progress may always
        start one, however large, so every put can make progress)."""
        objects, held = self._pending.held(client_id)
        if objects == 0:
            return
        most_objects, most_bytes = self._put_limits()
        if objects < most_objects and held + nbytes <= most_bytes:
            return
        if objects >= most_objects:
            raise TooManyPutsError(
                f"this client has {objects} puts in progress, its limit; end or revoke some first"
            )
        if held + nbytes > most_bytes:
            raise TooManyPutsError(
                f"this client's puts in progress hold {held} bytes; {nbytes} more would pass its limit of "
                f"{most_bytes}: end or revoke some first"
            )

    def _put_limits(self) -> tuple[int, int]:
        """(objects, bytes) a client's puts in progress may hold: objects at most half of all fence slots,
        whatever the setting; bytes half the capacity unless set."""
        space = self.space
        most_objects = min(self.config.client_put_objects, max(1, space.fence_slots // 2))
        return most_objects, self.config.client_put_bytes or space.capacity // 2

    def _pending_put(self, client_id: str, key: str) -> ObjectMeta:
        if self._pending.writer(key) != client_id:
            raise NotFoundError(f"no put of {key!r} in progress by this client")
        return self.objects[key]

    def _place(self, key: str, size: int, replicas: int, wait_for_room: bool = False) -> list[Replica]:
        """Distinct segments, distinct hosts first; evicts (policy order) rather than fail for space.
        A segment with free bytes but no free allocation slot gets slots back when its node acknowledges
        the fences of freed allocations: evicting more would not help sooner, so (with `wait_for_room`)
        the put waits for that instead."""
        self.space.check_fits(size, replicas)
        while True:
            placed = self.space.place(key, size, replicas)
            if placed is not None:
                return placed
            if wait_for_room:
                nodes = self.space.awaiting_slots(size)
                if nodes:
                    raise RoomComing("slots", functools.partial(self.space.when_slots_return, nodes))
            if not self._evict_one(wait_for_room=wait_for_room):
                raise NoSpaceError(f"no space for {replicas} x {size} bytes, nothing left to evict")


class _Started:
    """The puts of a run placed and not yet recorded: PutsStarted's columns. Every put has `count`
    copies."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.keys: list[str] = []
        self.sizes: list[int] = []
        self.checksums: list[int] = []
        self.segment_ids: list[int] = []
        self.offsets: list[int] = []
        self.slots: list[int] = []
        self.gens: list[int] = []

    def carved(self, keys: list[str], sizes: list[int], checksums: list[int], carved: Carved) -> None:
        """The first keys, as many as placement carved (the first of the run: columns as they came)."""
        placed = len(carved.segment_ids) // self.count
        self.keys, self.sizes, self.checksums = keys[:placed], sizes[:placed], checksums[:placed]
        self.segment_ids, self.offsets, self.slots, self.gens = carved[1:]

    def record(self, writer: str, pin: bool, asked: int, now: float, deadline: float) -> PutsStarted:
        """The ledger's record of these puts by `writer` (asking for `asked` replicas each)."""
        columns = (self.count, self.segment_ids, self.offsets, self.slots, self.gens)
        return PutsStarted(self.keys, self.sizes, self.checksums, *columns, writer, pin, asked, now, deadline)

    def add(self, key: str, size: int, checksum: int, copies: list[Replica]) -> None:
        self.keys.append(key)
        self.sizes.append(size)
        self.checksums.append(checksum)
        for r in copies:
            self.segment_ids.append(r.segment.id)
            self.offsets.append(r.offset)
            self.slots.append(r.slot)
            self.gens.append(r.gen)


class PlacedColumns:
    """A request's copies placed by runs, as columns: what StartedOutcomes' ints name."""

    def __init__(self) -> None:
        self.segment_ids: list[int] = []
        self.offsets: list[int] = []
        self.slots: list[int] = []
        self.gens: list[int] = []

    def extend(self, carved: Carved, count: int) -> range:
        """Adds a run's copies, `count` a put; returns each put's outcome: the int naming its copies,
        ((first copy) << 8) | count, as kvstore._meta.encode_put_reply reads it."""
        first = len(self.segment_ids)
        self.segment_ids += carved.segment_ids
        self.offsets += carved.offsets
        self.slots += carved.slots
        self.gens += carved.gens
        step = count << 8
        return range((first << 8) | count, (len(self.segment_ids) << 8) | count, step)

    def columns(self) -> tuple[list[int], list[int], list[int], list[int]]:
        return self.segment_ids, self.offsets, self.slots, self.gens


class StartedOutcomes(list[Outcome]):
    """Puts.start_puts' outcomes for a caller that encodes them in C++ (kvstore._meta.encode_put_reply, with
    `placed.columns()`): a put placed in a run is an int naming its copies in `placed`, not a list of
    Replica (one object per copy that nothing else reads). A put placed alone is a list of Replica, as
    in any other list."""

    def __init__(self) -> None:
        super().__init__()
        self.placed = PlacedColumns()
