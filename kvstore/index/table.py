"""The prefix index: per scope (model, block size, LoRA, tenant, salt), which instances hold each block
(by its sequence hash), on which medium and data-parallel rank; and the longest prefix each holds.

A shared store (a kvstore master's events: kvstore.index.events) holds blocks for no instance in
particular: any instance of the scope's model can load them. A block in the store therefore extends every
instance's run: an instance's longest match is the longest prefix where each block is on it (any medium or
rank) or in the store. Its per-medium and per-rank runs stay its own; the store's run from the start is
reported beside them (Matches.store).

A block keeps three bit masks: the instances holding it on any medium or rank, the (instance, medium)
pairs and the (instance, rank) pairs. A match walks the query's hashes once, and-ing the masks: one dict
lookup and three integer ands per block, whatever the number of instances (a bit that drops out records
its depth). Not thread-safe: one writer (kvstore.index.subscriptions) applies events under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

K = TypeVar("K")

MEDIA = ("GPU", "CPU", "DISK")  # always in a match (0 when nothing is there)
STORE = "STORE"  # a shared store's run (in a match's answer where a store credits the scope)
_MEDIUM_NAMES = {
    "GPU": "GPU",
    "DEVICE": "GPU",
    "G1": "GPU",
    "HBM": "GPU",
    "NPU": "GPU",
    "CPU": "CPU",
    "HOST": "CPU",
    "G2": "CPU",
    "DRAM": "CPU",
    "DISK": "DISK",
    "STORAGE": "DISK",
    "G3": "DISK",
    "SSD": "DISK",
}


def medium_name(medium: str | None) -> str:
    """The tier a publisher's medium names (vLLM's "GPU"/"CPU"/"STORAGE", the contract's "gpu"/"cpu"/
    "disk", G1/G2/G3); None (an engine that does not say) is its device. Others are kept, upper-cased."""
    if not medium:
        return "GPU"
    name = medium.upper()
    return _MEDIUM_NAMES.get(name, name)


class Scope(NamedTuple):
    """What makes two blocks with one hash the same block: a model, its block size, the LoRA adapter
    (empty for the base model), the tenant and the deployment's salt."""

    model: str
    block_size: int
    lora_name: str = ""
    tenant_id: str = "default"
    salt: str = ""

    def group(self) -> tuple[str, int, str, str]:
        """The instances a query of this scope considers (an instance serves every LoRA of its model)."""
        return (self.model, self.block_size, self.tenant_id, self.salt)


class Holder(NamedTuple):
    """Where blocks are: an instance, a medium (kvstore.index.table.medium_name) and a DP rank."""

    instance_id: str
    medium: str
    dp_rank: int


@dataclass
class Match:
    """One instance's hits, in blocks: the longest prefix on any medium/rank, per medium, per rank."""

    longest: int = 0
    media: dict[str, int] = field(default_factory=dict)
    ranks: dict[int, int] = field(default_factory=dict)


class Matches(NamedTuple):
    """A query's answer: the instances that match at all (their runs counting the store's blocks), and
    the store's own run from the start (in blocks), which every instance of the model reaches."""

    instances: dict[str, Match]
    store: int


class _Bits(Generic[K]):
    """Names to bit positions, reusing the positions of names let go."""

    def __init__(self) -> None:
        self.bit: dict[K, int] = {}
        self.name: dict[int, K] = {}
        self.users: dict[int, int] = {}
        self.all = 0  # every bit in use
        self._free: list[int] = []

    def take(self, name: K) -> int:
        bit = self.bit.get(name)
        if bit is None:
            bit = self._free.pop() if self._free else len(self.bit)
            self.bit[name] = bit
            self.name[bit] = name
            self.users[bit] = 0
            self.all |= 1 << bit
        self.users[bit] += 1
        return bit

    def give(self, bit: int) -> None:
        self.users[bit] -= 1
        if not self.users[bit]:
            del self.users[bit], self.bit[self.name.pop(bit)]
            self.all &= ~(1 << bit)
            self._free.append(bit)


class _Slot:
    """One holder's blocks in one scope, and the bit of each of its three masks."""

    __slots__ = ("hashes", "inst", "media", "ranks")

    def __init__(self, inst: int, media: int, ranks: int) -> None:
        self.inst, self.media, self.ranks = 1 << inst, 1 << media, 1 << ranks
        self.hashes: set[int] = set()


class _Block:
    __slots__ = ("holders", "inst", "media", "ranks")

    def __init__(self) -> None:
        self.inst = self.media = self.ranks = 0
        self.holders: list[_Slot] = []

    def remask(self) -> None:
        self.inst = self.media = self.ranks = 0
        for s in self.holders:
            self.inst |= s.inst
            self.media |= s.media
            self.ranks |= s.ranks


_NO_BLOCK = _Block()  # (what a hash no instance holds matches: no bit)


class _ScopeTable:
    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.slots: dict[Holder, _Slot] = {}
        self.shared: dict[int, int] = {}  # hash -> the store holders holding it
        self.shared_slots: dict[Holder, set[int]] = {}
        self.inst: _Bits[str] = _Bits()
        self.media: _Bits[tuple[str, str]] = _Bits()  # (instance, medium)
        self.ranks: _Bits[tuple[str, int]] = _Bits()  # (instance, dp rank)

    def slot(self, h: Holder) -> _Slot:
        s = self.slots.get(h)
        if s is None:
            i = h.instance_id
            s = self.slots[h] = _Slot(
                self.inst.take(i), self.media.take((i, h.medium)), self.ranks.take((i, h.dp_rank))
            )
        return s

    def drop_slot(self, h: Holder) -> int:
        s = self.slots.pop(h)
        for digest in s.hashes:
            self._unhold(digest, s)
        for bits, mask in ((self.inst, s.inst), (self.media, s.media), (self.ranks, s.ranks)):
            bits.give(mask.bit_length() - 1)
        return len(s.hashes)

    def _unhold(self, digest: int, s: _Slot) -> None:
        block = self.blocks[digest]
        block.holders.remove(s)
        if block.holders:
            block.remask()
        else:
            del self.blocks[digest]

    def unshare(self, digest: int) -> None:
        left = self.shared[digest] - 1
        if left:
            self.shared[digest] = left
        else:
            del self.shared[digest]

    def entries(self) -> int:
        return len(self.blocks) + len(self.shared)

    def empty(self) -> bool:
        return not self.slots and not self.shared_slots

    def start(self, instance_id: str | None) -> tuple[int, int, int]:
        """The masks a match starts from: every instance (or the one asked about), all of its media and
        ranks."""
        if instance_id is None:
            return self.inst.all, self.media.all, self.ranks.all
        bit = self.inst.bit.get(instance_id)
        if bit is None:
            return 0, 0, 0
        media = sum(1 << b for (i, _), b in self.media.bit.items() if i == instance_id)
        ranks = sum(1 << b for (i, _), b in self.ranks.bit.items() if i == instance_id)
        return 1 << bit, media, ranks


class PrefixIndex:
    """Every scope's table. `max_blocks` bounds the (scope, hash) entries in all (an instance's and a
    store's entries of one hash are two): stores past it are refused and counted (a publisher cannot grow
    the index without end)."""

    def __init__(self, max_blocks: int = 16_000_000) -> None:
        self.max_blocks = max_blocks
        self._scopes: dict[Scope, _ScopeTable] = {}
        self.entries = 0
        self.refused = 0

    def _table(self, scope: Scope) -> _ScopeTable:
        table = self._scopes.get(scope)
        if table is None:
            table = self._scopes[scope] = _ScopeTable()
        return table

    def store(self, scope: Scope, holder: Holder, hashes: Iterable[int]) -> None:
        table = self._table(scope)
        s = table.slot(holder)
        blocks = table.blocks
        for digest in hashes:
            if digest in s.hashes:
                continue
            block = blocks.get(digest)
            if block is None:
                if self.entries >= self.max_blocks:
                    self.refused += 1
                    continue
                block = blocks[digest] = _Block()
                self.entries += 1
            block.holders.append(s)
            block.inst |= s.inst
            block.media |= s.media
            block.ranks |= s.ranks
            s.hashes.add(digest)
        if not s.hashes:
            self._drop(scope, table, holder)

    def store_shared(self, scope: Scope, holder: Holder, hashes: Iterable[int]) -> None:
        """Blocks a store holds (`holder` names the store's publisher and medium): hits for every instance
        of the scope's model."""
        table = self._table(scope)
        mine = table.shared_slots.setdefault(holder, set())
        shared = table.shared
        for digest in hashes:
            if digest in mine:
                continue
            if digest not in shared:
                if self.entries >= self.max_blocks:
                    self.refused += 1
                    continue
                shared[digest] = 0
                self.entries += 1
            shared[digest] += 1
            mine.add(digest)
        if not mine:
            self._drop(scope, table, holder, shared=True)

    def remove(self, scope: Scope, holder: Holder, hashes: Iterable[int]) -> None:
        table = self._scopes.get(scope)
        s = table.slots.get(holder) if table else None
        if table is None or s is None:
            return
        self._release(scope, table, holder, s.hashes, hashes, lambda digest: table._unhold(digest, s))

    def remove_shared(self, scope: Scope, holder: Holder, hashes: Iterable[int]) -> None:
        table = self._scopes.get(scope)
        mine = table.shared_slots.get(holder) if table else None
        if table is None or mine is None:
            return
        self._release(scope, table, holder, mine, hashes, table.unshare, shared=True)

    def _release(
        self,
        scope: Scope,
        table: _ScopeTable,
        holder: Holder,
        held: set[int],
        hashes: Iterable[int],
        let_go: Callable[[int], None],
        shared: bool = False,
    ) -> None:
        """Lets go of the blocks of `hashes` that `holder` holds (`held`: its own or its shared set), and of
        the holder once it holds none."""
        before = table.entries()
        for digest in hashes:
            if digest in held:
                held.discard(digest)
                let_go(digest)
        self.entries -= before - table.entries()
        if not held:
            self._drop(scope, table, holder, shared=shared)

    def holds(self, scope: Scope, holder: Holder, digest: int) -> bool:
        table = self._scopes.get(scope)
        s = table.slots.get(holder) if table else None
        return s is not None and digest in s.hashes

    def clear(self, instance_id: str, dp_rank: int | None = None, medium: str | None = None) -> None:
        """Forgets what an instance (or a store's publisher) holds (on one rank, one medium, when given),
        in every scope."""

        def chosen(h: Holder) -> bool:
            return (
                h.instance_id == instance_id
                and (dp_rank is None or h.dp_rank == dp_rank)
                and (medium is None or h.medium == medium)
            )

        for scope, table in list(self._scopes.items()):
            for h in [h for h in table.slots if chosen(h)]:
                self._drop(scope, table, h)
            for h in [h for h in table.shared_slots if chosen(h)]:
                self._drop(scope, table, h, shared=True)

    def _drop(self, scope: Scope, table: _ScopeTable, holder: Holder, shared: bool = False) -> None:
        before = table.entries()
        if shared:
            for digest in table.shared_slots.pop(holder):
                table.unshare(digest)
        else:
            table.drop_slot(holder)
        self.entries -= before - table.entries()
        if table.empty():
            del self._scopes[scope]

    def match(self, scope: Scope, hashes: list[int], instance_id: str | None = None) -> dict[str, Match]:
        """Per instance matching at least the first block: its longest run of `hashes` from the start."""
        return self.match_all(scope, hashes, instance_id).instances

    def match_all(self, scope: Scope, hashes: list[int], instance_id: str | None = None) -> Matches:
        """match(), and the store's run: a block in the store keeps every instance's run going."""
        table = self._scopes.get(scope)
        if table is None or not hashes:
            return Matches({}, 0)
        blocks, shared = table.blocks, table.shared
        run_i, run_m, run_r = table.start(instance_id)
        depth_i: dict[int, int] = {}
        depth_m: dict[int, int] = {}
        depth_r: dict[int, int] = {}
        store = -1  # (the store's run, once it ends)
        depth = 0
        for digest in hashes:
            block = blocks.get(digest, _NO_BLOCK)
            in_store = digest in shared
            if not in_store and store < 0:
                store = depth
            i = run_i if in_store else run_i & block.inst
            m, r = run_m & block.media, run_r & block.ranks
            if i != run_i:
                _record(run_i & ~i, depth, depth_i)
            if m != run_m:
                _record(run_m & ~m, depth, depth_m)
            if r != run_r:
                _record(run_r & ~r, depth, depth_r)
            run_i, run_m, run_r = i, m, r
            if store >= 0 and not (i | m | r):
                break
            depth += 1
        _record(run_i, depth, depth_i)
        _record(run_m, depth, depth_m)
        _record(run_r, depth, depth_r)
        return Matches(_name(table, depth_i, depth_m, depth_r), depth if store < 0 else store)

    def scopes(self) -> Iterator[tuple[Scope, int, int]]:
        """(scope, entries, holders) of every scope (a store's publisher counts as a holder)."""
        for scope, table in self._scopes.items():
            yield scope, table.entries(), len(table.slots) + len(table.shared_slots)


def _name(
    table: _ScopeTable, depth_i: dict[int, int], depth_m: dict[int, int], depth_r: dict[int, int]
) -> dict[str, Match]:
    out: dict[str, Match] = {}
    for bit, n in depth_i.items():
        out[table.inst.name[bit]] = Match(longest=n)
    for bit, n in depth_m.items():
        inst, medium = table.media.name[bit]
        out[inst].media[medium] = n
    for bit, n in depth_r.items():
        inst, rank = table.ranks.name[bit]
        out[inst].ranks[rank] = n
    return out


def _record(bits: int, depth: int, into: dict[int, int]) -> None:
    if not depth:
        return  # (no match at all: not listed)
    while bits:
        low = bits & -bits
        into[low.bit_length() - 1] = depth
        bits ^= low
