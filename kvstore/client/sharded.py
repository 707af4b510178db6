"""`ShardedStore`: the client of a cluster whose key space is split over S masters (kvstore.cluster.shards).

It joins each shard as an ordinary Store of its own (its session, master connection, lease cache and
transfer engine) and routes each key to its shard: a batch is split by shard, the parts run in
parallel (one call per shard), the results are merged back in key order. A shard whose master cannot be
reached makes only its keys fail: misses for reads, its error code for writes, never another shard's
keys and never wrong bytes. One shard never comes here: Store.connect is today's client then.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import numpy as np

from kvstore.blocks import member_key
from kvstore.client.buffers import piece_arrays
from kvstore.client.deadline import Deadline
from kvstore.client.put_chunk import PutResult
from kvstore.client.read_batch import MISS
from kvstore.client.store import Store
from kvstore.cluster.shard_joins import ShardJoins
from kvstore.cluster.shards import shard_of, split_by_shard
from kvstore.config import StoreConfig
from kvstore.errors import InvalidArgumentError, KVStoreError, MasterUnavailableError, NotSupportedError
from kvstore.rpc import validate as v
from kvstore.rpc.messages import ObjectLocation, PrefixMatch

T = TypeVar("T")


class ShardedStore:
    """Store's data operations over S shards (put, get, exists, remove, their batch forms, blocks and
    buffers); close() leaves every shard."""

    def __init__(self, shards: int, config: StoreConfig) -> None:
        """`config`: the settings the cluster was joined with (a connector reads them: head_split...).
        The shards are joined by join()."""
        self.config = config
        self.shards = shards
        self._stores: list[Store | None] = [None] * shards
        self._buffers: list[Any] = []  # registered with every shard, one joined later included
        self._lock = threading.Lock()  # (the two above: a shard joined later sets its place)
        self._joins: ShardJoins[Store] | None = None
        self._pool = ThreadPoolExecutor(shards, thread_name_prefix="kvstore-shard")

    @classmethod
    def join(
        cls, store_class: type[Store], shards: Sequence[StoreConfig], config: StoreConfig | None = None
    ) -> ShardedStore:
        """Joins each shard (its settings from kvstore.cluster.shards.shard_configs) as a `store_class`;
        a process that contributes memory gives each shard an even part of its segment_size. A shard
        whose master cannot be reached now (down; between leaders for longer than the RPC timeout) is
        joined once it answers, on a thread (kvstore.cluster.shard_joins, as a node joins it): meanwhile
        its keys fail as a shard's that went down do. Any other refusal is raised."""
        sharded = cls(len(shards), config if config is not None else shards[0])
        parts = [dataclasses.replace(s, segment_size=s.segment_size // len(shards)) for s in shards]
        where = [p.master or f"etcd={p.etcd} cluster={p.cluster}" for p in parts]
        sharded._joins = ShardJoins(len(parts), lambda i: sharded._joined(store_class, i, parts[i]), where)
        try:
            sharded._joins.start(retry=True)
        except BaseException:
            sharded.close()
            raise
        return sharded

    @contextmanager
    def _joined(self, store_class: type[Store], shard: int, config: StoreConfig) -> Iterator[Store]:
        """Shard `shard` joined as a `store_class`, with every buffer registered so far; left on the way
        out."""
        store = store_class.from_config(config)
        try:
            with self._lock:  # (a buffer registered meanwhile is registered here or by register_buffer)
                for buffer in self._buffers:
                    store.register_buffer(buffer)
                self._stores[shard] = store
            yield store
        finally:
            with self._lock:
                self._stores[shard] = None
            store.close()

    @property
    def stores(self) -> list[Store | None]:
        """Each shard's Store, in shard order; None for a shard not joined yet (its master has not
        answered since this client started)."""
        with self._lock:
            return list(self._stores)

    def _store(self, shard: int) -> Store:
        """Shard `shard`'s Store; MasterUnavailableError while it is not joined."""
        store = self._stores[shard]
        if store is None:
            raise MasterUnavailableError(_not_joined(shard, self.shards))
        return store

    def close(self) -> None:
        """Leaves every shard joined (even when leaving one raises: the error is raised after); a shard
        still being joined is left by its own thread."""
        try:
            if self._joins is not None:
                self._joins.close()
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> ShardedStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def store_for(self, key: str) -> Store:
        """The shard's Store that holds `key` (MasterUnavailableError while that shard is not joined)."""
        return self._store(shard_of(key, self.shards))

    @property
    def engine(self) -> Any:
        """Refused: each shard's Store has its own transfer engine (`.stores[i].engine`), none is the
        client's."""
        raise NotSupportedError("a client of several shards has one transfer engine per shard, not one")

    def match_prefix(self, keys: Sequence[str]) -> PrefixMatch:
        """The leading keys stored over the shards the chain routes to (see Store.match_prefix): each
        shard is asked for its own keys, in chain order, all at once; the run ends at the first key
        absent on its shard. `replicas` as one Store gives them; `per_node`: each segment's leading run
        under its own name. A node is a member of each shard under a name of its own there, so its run
        under one name ends at the first key another shard holds (a shard that cannot be reached: its
        keys absent)."""
        held = self._split(list(keys), [], _held_prefix, lambda _e: None)
        matched = next((i for i, h in enumerate(held) if h is None), len(held))
        replicas: list[list[str]] = [h for h in held[:matched] if h is not None]
        per_node: dict[str, int] = {}
        for name in {name for copies in replicas for name in copies}:
            per_node[name] = next((i for i, copies in enumerate(replicas) if name not in copies), matched)
        return PrefixMatch(matched, replicas, per_node)

    # -- buffers: every shard's engine moves bytes in and out of them ---------------------------------
    def register_buffer(self, buffer: Any) -> None:
        with self._lock:  # (a shard joined later registers it too)
            for store in self._stores:
                if store is not None:
                    store.register_buffer(buffer)
            self._buffers.append(buffer)

    def unregister_buffer(self, buffer: Any) -> None:
        with self._lock:
            for store in self._stores:
                if store is not None:
                    store.unregister_buffer(buffer)
            self._buffers = [b for b in self._buffers if b is not buffer]

    # -- one key: its shard's store -------------------------------------------------------------------
    def put(self, key: str, value: Any, *, replicas: int | None = None, pin: bool = False) -> None:
        self.store_for(key).put(key, value, replicas=replicas, pin=pin)

    def put_from(self, key: str, buffer: Any, *, replicas: int | None = None, pin: bool = False) -> None:
        self.store_for(key).put(key, buffer, replicas=replicas, pin=pin)

    def get(self, key: str) -> bytes | None:
        return self.batch_get([key])[0]

    def get_into(self, key: str, buffer: Any) -> int:
        return self.batch_get_into([key], [buffer])[0]

    def exists(self, key: str) -> bool:
        return self.batch_exists([v.key(key)])[0]  # (a value that is not a key raises, as Store.exists)

    def remove(self, key: str, *, force: bool = False) -> None:
        self.store_for(key).remove(key, force=force)

    def change_replica(self, key: str, replicas: int) -> None:
        self.store_for(key).change_replica(key, replicas)

    # -- batches: split by shard, run in parallel, merged in key order --------------------------------
    def batch_put_from(self, keys: Sequence[str], buffers: Sequence[Any], **kwargs: Any) -> list[int]:
        return self._split(keys, [buffers], lambda s, k, b: s.batch_put_from(k, b, **kwargs), _error_code)

    def batch_put_from_multi_buffers(
        self, keys: Sequence[str], buffer_lists: Sequence[Sequence[Any]], **kwargs: Any
    ) -> list[int]:
        return self._split(
            keys,
            [buffer_lists],
            lambda s, k, b: s.batch_put_from_multi_buffers(k, b, **kwargs),
            _error_code,
        )

    def batch_put_from_pieces(
        self, keys: Sequence[str], addrs: Any, lengths: Any, counts: Any, **kwargs: Any
    ) -> list[int]:
        pieces = _Pieces(addrs, lengths, counts)
        return self._split(
            keys,
            [pieces.positions],
            lambda s, k, at: s.batch_put_from_pieces(k, *pieces.of(at), **kwargs),
            _error_code,
        )

    def batch_put_detailed(
        self, keys: Sequence[str], buffer_lists: Sequence[Sequence[Any]], **kwargs: Any
    ) -> list[PutResult]:
        return self._split(
            keys,
            [buffer_lists],
            lambda s, k, b: s.batch_put_detailed(k, b, **kwargs),
            lambda e: PutResult(-e.code, 0, kwargs.get("replicas") or self.config.replicas, str(e)),
        )

    def put_blocks(self, keys: Sequence[str], buffers: Sequence[Any], **kwargs: Any) -> list[int]:
        return self.batch_put_from(keys, buffers, **kwargs)

    def put_group(self, group: str, buffers: Sequence[Any], **kwargs: Any) -> list[int]:
        """Every member of a store group (see Store.put_group): a group lives on one shard, the one its
        members route to (a member's key, not the group's name: a name that itself has the member form
        routes by its own group)."""
        return self.store_for(member_key(group, 0, 1)).put_group(group, buffers, **kwargs)

    def batch_get(self, keys: Sequence[str]) -> list[bytes | None]:
        return self._split(keys, [], lambda s, k: s.batch_get(k), lambda _e: None)

    def batch_get_into(
        self, keys: Sequence[str], buffers: Sequence[Any], *, deadline: float | None = None
    ) -> list[int]:
        return self._split(
            keys, [buffers], lambda s, k, b: s.batch_get_into(k, b, deadline=deadline), lambda _e: MISS
        )

    def batch_get_into_multi_buffers(
        self, keys: Sequence[str], buffer_lists: Sequence[Sequence[Any]], *, deadline: float | None = None
    ) -> list[int]:
        return self._split(
            keys,
            [buffer_lists],
            lambda s, k, b: s.batch_get_into_multi_buffers(k, b, deadline=deadline),
            lambda _e: MISS,
        )

    def batch_get_into_pieces(
        self, keys: Sequence[str], addrs: Any, lengths: Any, counts: Any, *, deadline: float | None = None
    ) -> list[int]:
        pieces = _Pieces(addrs, lengths, counts)
        return self._split(
            keys,
            [pieces.positions],
            lambda s, k, at: s.batch_get_into_pieces(k, *pieces.of(at), deadline=deadline),
            lambda _e: MISS,
        )

    def get_blocks(
        self, keys: Sequence[str], buffers: Sequence[Any], *, deadline: float | None = None
    ) -> int:
        """The leading run of stored blocks loaded (see Store.get_blocks), in one lookup per shard: each
        shard is asked where its blocks are (its master stops at its first absent one and leases the
        rest), the run ends at the first block absent on any shard, and each shard reads its blocks of
        that run from what it was told. `deadline` counts from this call, lookups included."""
        until = Deadline.after(deadline)
        if len(keys) != len(buffers):
            raise InvalidArgumentError("keys and buffers differ in length")
        keys = list(keys)
        located = self._split(keys, [], _located_prefix, lambda _e: (None, False))
        n = next((i for i, (found, _) in enumerate(located) if found is None), len(keys))
        if n == 0:
            return 0

        def read(store: Store, part: list[str], into: list[Any], where: list[tuple[Any, bool]]) -> list[int]:
            found, cached = [f for f, _ in where], [c for _, c in where]
            return store.reads.get_into(part, [[b] for b in into], found, cached, until)

        results = self._split(keys[:n], [buffers[:n], located[:n]], read, lambda _e: MISS)
        return next((i for i, r in enumerate(results) if r < 0), n)

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        return self._split(keys, [], lambda s, k: s.batch_exists(k), lambda _e: False)

    def locate(self, keys: Sequence[str]) -> list[ObjectLocation | None]:
        return self._split(keys, [], lambda s, k: s.locate(k), lambda _e: None)

    def get_size(self, key: str) -> int | None:
        return self.store_for(key).get_size(key)

    def batch_remove(self, keys: Sequence[str], *, force: bool = False) -> list[int]:
        return self._split(keys, [], lambda s, k: s.batch_remove(k, force=force), _error_code)

    def remove_all(self, *, force: bool = False) -> int:
        return sum(self._each(lambda store: store.remove_all(force=force)))

    def stats(self) -> dict[str, Any]:
        """Each shard's Store.stats(), in shard order."""
        return {"shards": self._each(lambda store: store.stats())}

    # -- the split ------------------------------------------------------------------------------------
    def _split(
        self,
        keys: Sequence[str],
        columns: Sequence[Sequence[Any]],
        call: Callable[..., list[T]],
        failed: Callable[[KVStoreError], T],
    ) -> list[T]:
        """call(store, its keys, its part of each column) per shard that holds any of `keys`; a shard
        whose call raised a KVStoreError gives failed(error) for each of its keys."""
        for column in columns:
            if len(column) != len(keys):
                raise InvalidArgumentError(
                    f"{len(keys)} keys but {len(column)} values (buffers or pieces' counts)"
                )
        parts = [(s, p) for s, p in enumerate(split_by_shard(keys, self.shards)) if p]
        if not parts:  # no keys: no shard is asked
            return []
        if len(parts) == 1 and len(parts[0][1]) == len(keys):  # every key on one shard: no split
            shard, _ = parts[0]
            return _guarded(call, failed, partial(self._store, shard), list(keys), *map(list, columns))
        out: list[Any] = [None] * len(keys)

        def run(shard: int, positions: list[int]) -> list[T]:
            picked = [[column[i] for i in positions] for column in columns]
            store = partial(self._store, shard)
            return _guarded(call, failed, store, [keys[i] for i in positions], *picked)

        # the other parts on the pool, the first in this thread meanwhile (one hand-off fewer)
        futures = [(positions, self._pool.submit(run, shard, positions)) for shard, positions in parts[1:]]
        try:
            done = [(parts[0][1], run(*parts[0]))]
        finally:
            # Every part has ended before this returns or raises: a part still running would write into
            # buffers the caller takes back once the call failed.
            wait([future for _, future in futures])
        done += [(positions, future.result()) for positions, future in futures]
        for positions, results in done:
            for i, result in zip(positions, results, strict=True):
                out[i] = result
        return out

    def _each(self, call: Callable[[Store], T]) -> list[T]:
        def run(shard: int) -> T:
            return call(self._store(shard))

        futures = [self._pool.submit(run, shard) for shard in range(self.shards)]
        wait(futures)  # every shard's call has ended before one's error is raised
        return [f.result() for f in futures]


def _guarded(
    call: Callable[..., list[T]],
    failed: Callable[[KVStoreError], T],
    store: Callable[[], Store],
    keys: list[str],
    *cols: Any,
) -> list[T]:
    """One shard's part; its failure (its master unreachable, a refusal, the shard not joined yet) is
    its keys' alone. A caller's own mistake is raised, as one Store raises it."""
    try:
        return call(store(), keys, *cols)
    except InvalidArgumentError:
        raise
    except KVStoreError as exc:
        return [failed(exc)] * len(keys)


def _not_joined(shard: int, shards: int) -> str:
    return (
        f"shard {shard} of {shards} is not joined yet: its master has not answered since this client "
        "started (it is joined once it does)"
    )


def _located_prefix(store: Store, keys: list[str]) -> list[tuple[Any, bool]]:
    """Per key of one shard, (its replicas or None, whether from a lease): one lookup that stops at the
    shard's first absent key (Store.get_blocks' own)."""
    found, cached = store.locator.locate(keys, prefix=True)
    return list(zip(found, cached, strict=True))


def _held_prefix(store: Store, keys: list[str]) -> list[list[str] | None]:
    """Per key of one shard, the segments holding it, or None from the shard's first absent key on."""
    match = store.match_prefix(keys)
    return [*match.replicas[: match.matched], *[None] * (len(keys) - match.matched)]


def _error_code(exc: KVStoreError) -> int:
    return -exc.code


class _Pieces:
    """A batch's flat piece arrays (Store.batch_put_from_pieces), cut by key: key i's pieces are its
    counts[i] next ones."""

    def __init__(self, addrs: Any, lengths: Any, counts: Any) -> None:
        # checked for the whole batch, before any shard's part starts (as one Store checks them)
        self.addrs, self.lengths, self.counts = piece_arrays(addrs, lengths, counts)
        c = self.counts
        self.starts = np.cumsum(c) - c  # where each key's pieces begin
        self.positions = range(c.size)  # (a column: each key's own position)

    def of(self, positions: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The addresses, lengths and counts of the keys at `positions`, in that order."""
        if len(positions) == self.counts.size:  # (positions are distinct: the whole batch, as it is)
            return self.addrs, self.lengths, self.counts
        at = np.asarray(positions, dtype=np.int64)
        counts = self.counts[at]
        # each piece's index: its key's start, plus its place among that key's pieces
        firsts = np.cumsum(counts) - counts
        index = np.repeat(self.starts[at] - firsts, counts) + np.arange(int(counts.sum()))
        return self.addrs[index], self.lengths[index], counts
