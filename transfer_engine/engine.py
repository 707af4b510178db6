"""TransferEngine: the Python face of the C++ engine.

Memory is registered (or allocated) into regions; a peer engine is opened by its name
("host:port"); batches of READ/WRITE requests move bytes between a local address and a remote
region. A batch crosses into C++ once, as flat numpy arrays.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from transfer_engine import _core, checksum, ucx
from transfer_engine.config import EngineConfig
from transfer_engine.errors import (
    CODE_NAMES,
    AddressInUseError,
    EngineClosedError,
    HostNotUsableError,
    InvalidArgumentError,
    KVStoreError,
    NotSupportedError,
    StaleLocationError,
    TransferFailedError,
    TransferTimeoutError,
    error_for_code,
)
from transfer_engine.security import EngineSecurity


class Op(enum.IntEnum):
    READ = 0  # remote -> local
    WRITE = 1  # local -> remote


class RequestState(enum.IntEnum):
    PENDING = 0
    COMPLETED = 1
    FAILED = 2
    TIMED_OUT = 3


class ReadCheck(enum.IntEnum):
    """BatchHandle.wait_verified's verdicts besides the error code (> 0) of a request that failed."""

    VERIFIED = 0  # completed, and its landed bytes hash to the digest expected (or it was not checked)
    MISMATCH = -1  # completed, and its landed bytes hash to something else
    UNCHECKED = -2  # completed; no digest could be taken here (GPU memory, no C++ XXH3): verify it yourself


@dataclass(frozen=True)
class Region:
    """A registered local region. ``array`` is a uint8 view of it when Python can see the memory."""

    id: int
    key: int  # its own access key: never sent (a peer presents its derivation for its session)
    addr: int
    length: int
    kind: str  # memory kind: host, host-pinned, gpu:N or file
    exported: bool
    shareable: bool
    read_only: bool = False
    array: np.ndarray | None = None
    owner: Any = None  # keeps a registered Python buffer alive while registered
    pinned_by: str = "none"  # allocated pinned: how it was page-locked ("cuda" or "mlock")
    numa_node: int = -1  # host memory's NUMA node (picks the NICs its transfers leave on); -1: unknown

    def address(self, offset: int = 0) -> int:
        if not 0 <= offset <= self.length:
            raise InvalidArgumentError(f"offset {offset} outside region of {self.length} bytes")
        return self.addr + offset


@dataclass(frozen=True)
class RemoteRegion:
    """A region a peer exported: what may be read or written there."""

    id: int
    length: int
    kind: str
    shareable: bool
    base: int = 0  # the address in the peer; Mooncake-style APIs address remote memory by it


@dataclass(frozen=True)
class NicAddress:
    """One address of a NIC an engine may use (KVSTORE_NICS), as its descriptor advertises it."""

    name: str  # net device
    rdma_device: str  # "" when it has none
    address: str
    prefix_len: int
    numa_node: int  # -1: unknown
    speed_mbps: int  # -1: unknown

    @classmethod
    def of(cls, raw: dict[str, Any]) -> NicAddress:
        return cls(**raw)


@dataclass(frozen=True)
class PathInfo:
    """One path of a link to a peer (local NIC -> the peer's NIC) and what it carried."""

    transport: str
    local_nic: str  # "" when the kernel chooses the route (no NIC shares a subnet with the peer)
    local_address: str
    remote_nic: str
    remote_address: str  # "host:port"
    up: bool
    connections: int  # live ones
    bytes: int  # moved by slices that completed on it
    slices: int
    failures: int  # times it went down
    failovers: int  # slices it lost that were sent again on another path


def _numa_node(node: int | None) -> int:
    if node is None:
        return -1
    if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < 4096:
        raise InvalidArgumentError(f"numa_node must be a NUMA node number (0-4095), not {node!r}")
    return node


@dataclass(frozen=True)
class Peer:
    """An opened peer: another engine, in this process, on this host or on another one."""

    name: str
    handle: int
    transport: str  # the cheapest transport that reaches it
    engine_id: int
    regions: tuple[RemoteRegion, ...]
    # `transport`, then any dearer one carrying memory kinds it cannot move (cuda_ipc: a same-host peer's
    # GPU memory); each request goes by the first that moves its pair of kinds
    transports: tuple[str, ...] = ()
    nics: tuple[NicAddress, ...] = ()  # the NICs of its host it may use, per address

    def region(self, region_id: int | None = None) -> RemoteRegion:
        """The region with this id, or the first (largest-first is not implied) when id is None."""
        for r in self.regions:
            if region_id is None or r.id == region_id:
                return r
        raise InvalidArgumentError(f"peer {self.name} exports no region {region_id}")


class BatchHandle:
    """A submitted batch. Every request ends COMPLETED, FAILED or TIMED_OUT."""

    def __init__(self, engine: TransferEngine, core_batch: Any) -> None:
        self._engine = engine
        self._batch = core_batch

    def __len__(self) -> int:
        return int(self._batch.size)

    def wait(self, timeout: float | None = None, *, help: bool = True) -> bool:
        """Waits up to ``timeout`` seconds (None: the batch deadline). True when every request is final.

        The waiting thread runs queued copies meanwhile; ``help=False`` leaves them to the engine's
        workers, for a caller that overlaps work of its own (e.g. verifying what already arrived).
        """
        us = -1 if timeout is None else max(0, int(timeout * 1e6))
        return bool(self._engine._core_engine().wait(self._batch, us, help))

    def done(self) -> bool:
        return bool(self._batch.done())

    def state(self) -> RequestState:
        """The whole batch: PENDING until every request is final, then COMPLETED when all completed,
        FAILED when any failed, else TIMED_OUT."""
        if not self.done():
            return RequestState.PENDING
        states = self.states()
        if (states == RequestState.COMPLETED).all():
            return RequestState.COMPLETED
        return RequestState.FAILED if (states == RequestState.FAILED).any() else RequestState.TIMED_OUT

    def states(self) -> np.ndarray:
        """Per-request :class:`RequestState` values (int32 array)."""
        return self._batch.states()

    def errors(self) -> np.ndarray:
        """Per-request core error codes; 0 where the request did not fail."""
        return self._batch.errors()

    def digests(self) -> tuple[np.ndarray, np.ndarray]:
        """(taken, digests): for each completed read that asked for it (submit's `digests`), the XXH3-64 of
        the bytes it landed; taken is False where none was (not asked, moved in several slices, a GPU
        buffer, or not complete): hash those yourself."""
        taken, values = self._batch.digests()
        return taken, values

    def wait_verified(self, expected: np.ndarray, check: np.ndarray) -> np.ndarray:
        """Runs the batch to its end, this thread helping to move bytes and verifying each read as it
        ends (while its bytes are still in cache): per request a :class:`ReadCheck` value, where check[i]
        asks that request i's landed bytes hash (XXH3-64) to expected[i], or the error code (> 0) of a
        request that did not complete. A read submitted without asking for its digest is not checked."""
        return self._engine._core_engine().wait_verified(
            self._batch, np.ascontiguousarray(expected, np.uint64), np.ascontiguousarray(check, np.uint8)
        )

    def help_once(self) -> bool:
        """Runs one queued copy (of any batch) on this thread; False when none is queued. Lets a caller
        interleave its own work on arrived data with moving the rest."""
        return bool(self._engine._core_engine().help_once())

    def raise_for_status(self) -> None:
        """Raises TransferFailedError (or TransferTimeoutError) unless every request completed."""
        states = self.states()
        bad = np.flatnonzero(states != RequestState.COMPLETED)
        if bad.size == 0:
            return
        errors = self.errors()
        first = int(bad[0])
        reason = CODE_NAMES.get(int(errors[first]), str(errors[first]))
        message = f"{bad.size} of {len(states)} requests did not complete (first: #{first}, {reason})"
        if np.all(states[bad] == RequestState.TIMED_OUT):
            raise TransferTimeoutError(message)
        raise TransferFailedError(message, states=states, errors=errors)


def _explained(exc: KVStoreError, config: EngineConfig) -> KVStoreError:
    """The core's failure to listen on a handshake port someone else holds, or on a host that is not this
    machine's, as the error that says which setting chose it (the core's own text is the errno's:
    "bind/listen on H:P: Address already in use", or the resolver's: "cannot resolve 'H': ...")."""
    bind_failed = f"bind/listen on {config.host}:{config.port}: "
    if config.port and str(exc) == bind_failed + os.strerror(errno.EADDRINUSE):
        return AddressInUseError(config.host, config.port, "KVSTORE_PORT (the transfer engine's port)")
    host = "KVSTORE_HOST (the transfer engine's host)"
    if str(exc) == bind_failed + os.strerror(errno.EADDRNOTAVAIL):
        reason = f"{config.host!r} is not an address of this host"
        return HostNotUsableError(config.host, config.port, reason, host)
    unresolved = f"cannot resolve '{config.host}': "
    if str(exc).startswith(unresolved):
        reason = f"the name {config.host!r} does not resolve ({str(exc)[len(unresolved) :]})"
        return HostNotUsableError(config.host, config.port, reason, host)
    return exc


class TransferEngine:
    """Moves bytes between registered memory here and regions of peers (other engines).

    >>> with TransferEngine() as engine:
    ...     buf = engine.allocate(1 << 20)
    """

    def __init__(
        self, config: EngineConfig | None = None, *, security: EngineSecurity | None = None, **overrides: Any
    ) -> None:
        """`config` or keyword `overrides` of EngineConfig (from the environment if neither); `security`:
        the cluster secret this engine's peers must prove (from the environment if None)."""
        if config is None:
            config = EngineConfig.load(**overrides)
        elif overrides:
            raise InvalidArgumentError("give either a config or keyword overrides, not both")
        else:
            config.validate()
        self.config = config
        if security is None:
            security = EngineSecurity.load()
        security.check_listen(config.host, "the transfer engine")
        self._core: Any = _core.Engine(**config.to_core(), cluster_secret=security.secret())
        if self._core.transport_starts("ucx"):  # (the core decides; UCX must be loaded before it starts)
            ucx.preload(config.ucx_library)
        try:
            self._core.start()
        except KVStoreError as exc:
            raise _explained(exc, config) from None
        self._regions: dict[int, Region] = {}

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> TransferEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Fails what is in flight, unregisters everything and stops serving peers."""
        if self._core is not None:
            self._core.stop()
            self._core = None
            self._regions.clear()

    def _core_engine(self) -> Any:
        if self._core is None:
            raise EngineClosedError("transfer engine is closed")
        return self._core

    @property
    def name(self) -> str:
        """This engine's name, "host:port" (its handshake endpoint), which peers open."""
        return str(self._core_engine().name)

    @property
    def engine_id(self) -> int:
        return int(self._core_engine().id)

    @property
    def copy_parallelism(self) -> int:
        """Threads that copy a same-host batch a caller waits on: the copy workers (copy_threads, at most
        one fewer than this process's cores) and the waiting caller. Baselines give memcpy as many."""
        return int(self._core_engine().copy_parallelism)

    @property
    def owner(self) -> str:
        """Who this engine's process is to its master (set_owner; "" until then): in its descriptor, which
        the master checks a mount of this engine's regions against."""
        return str(self._core_engine().descriptor()["owner"])

    def set_owner(self, owner: str) -> None:
        """Names the client this process registered as with its master (at most 256 bytes)."""
        if len(owner.encode()) > 256:
            raise InvalidArgumentError("an engine's owner is at most 256 bytes")
        self._core_engine().set_owner(owner)

    @property
    def host_id(self) -> str:
        """Same value on every engine that can reach this one by shared memory (host + network namespace)."""
        return str(self._core_engine().descriptor()["host_id"])

    @property
    def nics(self) -> list[NicAddress]:
        """The NICs of this host the engine may use (KVSTORE_NICS), once per address: what its
        descriptor advertises to peers (`kvstore topology` shows how they were chosen)."""
        return [NicAddress.of(n) for n in self._core_engine().descriptor()["nics"]]

    # -- memory ----------------------------------------------------------------------------------
    @property
    def transports(self) -> list[str]:
        """The transports this engine runs (enabled ones), cheapest first."""
        return list(self._core_engine().transports())

    @property
    def unavailable_transports(self) -> dict[str, str]:
        """Enabled transports that serve and reach nobody here, and why (e.g. ucx without UCX)."""
        return dict(self._core_engine().unavailable_transports())

    def register(
        self, buffer: Any, *, kind: str = "host", export: bool = False, numa_node: int | None = None
    ) -> Region:
        """Registers a numpy array, bytearray, memoryview or other contiguous host buffer.

        `export=True` lets peers read and write it (by region id and key); by default only this engine's
        own transfers use it. A read-only buffer (bytes, a read-only array) is registered read-only:
        transfers may read it, never write into it, and it cannot be exported. `numa_node` says which
        NUMA node the memory is on (its transfers leave on the NICs near it: Mooncake's "cpu:N"
        location); by default the kernel is asked where its first page lies.
        """
        node = _numa_node(numa_node)
        try:
            array = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) else buffer
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"cannot register {type(buffer).__name__}: {exc}") from exc
        if not array.flags.c_contiguous:
            raise InvalidArgumentError("buffer must be C-contiguous")
        read_only = not array.flags.writeable
        if read_only and export:
            raise InvalidArgumentError("a read-only buffer cannot be exported: peers could write into it")
        flat = array.reshape(-1).view(np.uint8)
        info = self._core_engine().register(
            flat.ctypes.data, flat.nbytes, self._host_kind(kind), export, read_only, node
        )
        return self._add(info, array=flat, owner=buffer)

    def register_ptr(
        self,
        ptr: int,
        length: int,
        *,
        kind: str = "host",
        export: bool = False,
        read_only: bool = False,
        numa_node: int | None = None,
    ) -> Region:
        """Registers raw memory by address, of any memory kind (host, host-pinned, gpu:N, file). The
        caller keeps it valid until :meth:`unregister`; host memory must be mapped. Transports that
        cannot reach a kind refuse requests on it at submit (NOT_SUPPORTED). Not exported unless asked.
        `numa_node`: as for :meth:`register`."""
        if not 0 < ptr < 2**64 or not 0 < length < 2**63:
            raise InvalidArgumentError("ptr and length must be positive (and fit in 64 bits)")
        node = _numa_node(numa_node)
        return self._add(self._core_engine().register(ptr, length, kind, export, read_only, node))

    def register_file(self, path: str, *, export: bool = True) -> Region:
        """Registers a file or block device (opened read-only with O_DIRECT) as a region of kind file:
        offsets are the file's. Peers read it through transports that serve kind file (TCP), never
        write it; it has no address here, so it is never the local side of a transfer. Exported unless
        asked not to be."""
        return self._add(self._core_engine().register_file(str(path), export))

    def allocate(
        self,
        size: int,
        *,
        export: bool = True,
        fence_slots: int = 0,
        pinned: bool = False,
        populate: bool = True,
        backing_file: str = "",
    ) -> Region:
        """Allocates pre-faulted memfd-backed host memory (mappable by same-host peers) and registers it.

        With `fence_slots` the region is carved into fenced allocations: every transfer into it must name
        the live (slot, generation) that :meth:`announce_allocations` named, and :meth:`kill_allocations`
        fences one off for good (a storage node's segment, whose allocations the master hands out and
        frees). `pinned` page-locks it (kind
        host-pinned): registered with the CUDA driver where one is present, else mlock; `pinned_by` says
        which. NoMemoryError, naming RLIMIT_MEMLOCK, when the memory cannot be locked. `populate` False
        (unpinned only) returns at once with the pages left to :meth:`prefault`, which several threads
        may run on disjoint ranges (huge pages are asked for where the system offers them).
        `backing_file`: the memory is that file in shared memory (/dev/shm, hugetlbfs) instead of an
        anonymous memfd, its bytes kept when it already has `size` bytes (emptied to `size` otherwise),
        so a process started again maps what an earlier one left there."""
        if not 0 < size < 2**63:
            raise InvalidArgumentError(f"size must be positive and below 2^63, got {size}")
        if not 0 <= fence_slots <= 1 << 26:
            raise InvalidArgumentError(f"fence_slots must be 0..2^26, got {fence_slots}")
        if "\0" in backing_file:
            raise InvalidArgumentError("backing_file must not contain NUL")
        info, array = self._core_engine().allocate(size, export, fence_slots, pinned, populate, backing_file)
        return self._add(info, array=array)

    def prefault(self, region: Region, offset: int, length: int) -> None:
        """Faults in [offset, offset+length) of a region allocated with populate=False (GIL released;
        offset a page multiple). NoMemoryError when the host has no memory left for it."""
        self._core_engine().prefault(region.id, offset, length)

    def kill_allocations(
        self, region: Region | int, slots: Sequence[int], gens: Sequence[int], *, timeout: float = 0.05
    ) -> bool:
        """Fences allocations of a fenced region off: no transfer naming them is admitted any more.
        True once every transfer admitted before has ended (only then may their memory be reused);
        False when one did not end within `timeout` (a stopped peer): call again later."""
        region_id = region.id if isinstance(region, Region) else int(region)
        return bool(
            self._core_engine().kill_allocations(region_id, list(slots), list(gens), int(timeout * 1000))
        )

    def announce_allocations(
        self,
        region: Region | int,
        slots: Sequence[int],
        gens: Sequence[int],
        starts: Sequence[int],
        sizes: Sequence[int],
    ) -> None:
        """Names allocations handed out in a fenced region of this engine: slot `slots[i]` now holds
        generation `gens[i]` over [starts[i], starts[i] + sizes[i]). A peer's transfer is admitted only
        into the allocation its slot holds, with that generation exactly and inside its range (one naming
        an allocation not announced yet waits for it a few seconds). An announcement older than the slot's
        last one, or of a killed allocation, is ignored. OutOfRangeError for a range outside the region."""
        region_id = region.id if isinstance(region, Region) else int(region)
        core = self._core_engine()
        core.announce_allocations(region_id, list(slots), list(gens), list(starts), list(sizes))

    @contextlib.contextmanager
    def fenced(self, region: Region | int, slot: int, gen: int) -> Iterator[None]:
        """Holds a live allocation of this engine's own fenced region while the body touches it (e.g.
        a copy into it made by this process, announced or not): a kill waits for the body;
        StaleLocationError if dead."""
        region_id = region.id if isinstance(region, Region) else int(region)
        core = self._core_engine()
        if not core.fence_enter(region_id, slot, gen):
            raise StaleLocationError(f"allocation (slot {slot}, generation {gen}) was fenced off")
        try:
            yield
        finally:
            core.fence_leave(region_id, slot)

    def raise_fence_floor(self, region: Region | int, floor: int, *, timeout: float = 0.05) -> bool:
        """Fences off every allocation of generation <= floor (see :meth:`kill_allocations`)."""
        region_id = region.id if isinstance(region, Region) else int(region)
        return bool(self._core_engine().raise_fence_floor(region_id, floor, int(timeout * 1000)))

    def kill_allocations_but(
        self, region: Region | int, floor: int, kept_slots: Any, kept_gens: Any, *, timeout: float = 0.05
    ) -> bool:
        """Fences off every allocation of generation <= floor but the kept ones (kept_slots[i],
        kept_gens[i]: sequences or arrays, any order, a slot at most once), each of which stays alive in
        its own generation only (its slot's older ones die): a storage node mounting its segment again
        with the objects it still holds, in one pass over the fence table. True once drained, False as
        :meth:`kill_allocations` (call again). InvalidArgumentError, nothing killed, for a kept slot past
        the table or named twice, or a kept generation of 0."""
        region_id = region.id if isinstance(region, Region) else int(region)
        slots, gens = _as_column(kept_slots, np.uint32), _as_column(kept_gens, np.uint64)
        core = self._core_engine()
        return bool(core.kill_allocations_but(region_id, floor, slots, gens, int(timeout * 1000)))

    def unregister(self, region: Region | int) -> None:
        """Removes a region; waits until no transfer touches it, so the memory may be freed after."""
        region_id = region.id if isinstance(region, Region) else int(region)
        self._core_engine().unregister(region_id)
        self._regions.pop(region_id, None)

    def regions(self) -> list[Region]:
        return list(self._regions.values())

    def _add(self, info: dict[str, Any], array: np.ndarray | None = None, owner: Any = None) -> Region:
        region = Region(
            id=info["id"],
            key=info["key"],
            addr=info["base"],
            length=info["length"],
            kind=info["kind"],
            exported=info["exported"],
            shareable=info["shareable"],
            read_only=info["read_only"],
            array=array,
            owner=owner,
            pinned_by=info.get("pinned_by", "none"),
            numa_node=info.get("numa_node", -1),
        )
        self._regions[region.id] = region
        return region

    @staticmethod
    def _host_kind(kind: str) -> str:
        """Python buffers are host memory; GPU buffers arrive with the GPU memory support."""
        if kind not in ("host", "host-pinned"):
            raise NotSupportedError(
                f"a Python buffer is host memory; register memory of kind {kind!r} with register_ptr"
            )
        return kind

    # -- peers -----------------------------------------------------------------------------------
    def open_peer(self, name: str, transport: str | None = None) -> Peer:
        """Connects to a peer engine ("host:port"), learning its regions in a handshake. `transport`
        forces one (default: the engine's setting, usually auto)."""
        return self._peer(self._core_engine().open_peer(name, transport or self.config.transport))

    def paths(self, peer: Peer) -> list[PathInfo]:
        """The paths this engine's links to `peer` use (one per pair of NICs on a shared subnet, else
        one) and what each carried: bytes, slices, times it went down, slices moved off it."""
        return [PathInfo(**raw) for raw in self._core_engine().peer_paths(peer.handle)]

    def refresh_peer(self, peer: Peer) -> Peer:
        """Re-reads a peer's regions (after it registered more) and reconnects."""
        self._core_engine().refresh_peer(peer.handle)
        return self._peer(peer.handle)

    def _peer(self, handle: int) -> Peer:
        info = self._core_engine().peer_info(handle)
        peer = Peer(
            name=info["name"],
            handle=handle,
            transport=info["transport"],
            transports=tuple(info["links"]),
            engine_id=info["engine_id"],
            regions=tuple(
                RemoteRegion(r["id"], r["length"], r["kind"], r["shareable"], r["base"])
                for r in info["regions"]
            ),
            nics=tuple(NicAddress.of(n) for n in info["nics"]),
        )
        return peer

    # -- transfers -------------------------------------------------------------------------------
    def submit(
        self,
        ops: Sequence[int] | np.ndarray | int,
        local_addrs: Sequence[int] | np.ndarray,
        peers: Peer | Sequence[int] | np.ndarray,
        region_ids: Sequence[int] | np.ndarray | int,
        offsets: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | np.ndarray | int,
        *,
        timeout: float | None = None,
        fence_slots: Sequence[int] | np.ndarray | None = None,
        fence_gens: Sequence[int] | np.ndarray | None = None,
        digests: Sequence[int] | np.ndarray | None = None,
        pieces: tuple[Any, Any, Any] | None = None,
    ) -> BatchHandle:
        """Submits a batch and returns at once. Scalars (op, peer, region id, length) broadcast.
        `fence_slots`/`fence_gens` name each request's allocation in a fenced region (both or neither).
        `digests`: reads whose landed bytes' XXH3-64 is wanted, taken as they land where one slice moves
        the request (:meth:`BatchHandle.digests`). `pieces` = (counts, addrs, lengths): request i gathers
        (a write) or scatters (a read) its next counts[i] local pieces, in order, against its one remote
        range (0: its local_addrs entry); its length must be their sum. Same-host and TCP transports move
        them as one request (one digest over all); others as a request each."""
        local = _as_column(local_addrs, np.uint64)
        n = local.size

        def column(values: Any, dtype: Any) -> np.ndarray:
            out = _as_column(values, dtype)
            if out.size == 1 and n != 1:
                out = np.full(n, out[0], dtype=dtype)
            if out.size != n:
                raise InvalidArgumentError("batch columns differ in length")
            return out

        peer_handles = peers.handle if isinstance(peers, Peer) else peers
        deadline = self.config.transfer_timeout if timeout is None else timeout
        if digests is not None and not checksum.available():  # (no C++ XXH3 here: none can be taken)
            digests = None
        core_batch = self._core_engine().submit(
            column(ops, np.uint8),
            local,
            column(peer_handles, np.uint32),
            column(region_ids, np.uint64),
            column(offsets, np.uint64),
            column(lengths, np.uint64),
            int(deadline * 1000),
            None if fence_slots is None else column(fence_slots, np.uint32),
            None if fence_gens is None else column(fence_gens, np.uint64),
            None if digests is None else column(digests, np.uint8),
            *(
                (None, None, None)
                if pieces is None
                else (
                    column(pieces[0], np.uint32),
                    _as_column(pieces[1], np.uint64),
                    _as_column(pieces[2], np.uint64),
                )
            ),
        )
        return BatchHandle(self, core_batch)

    def transfer_sync(
        self,
        op: Op | int,
        local_addrs: Sequence[int] | np.ndarray,
        peer: Peer,
        region_ids: Sequence[int] | np.ndarray | int,
        offsets: Sequence[int] | np.ndarray,
        lengths: Sequence[int] | np.ndarray | int,
        *,
        timeout: float | None = None,
    ) -> np.ndarray:
        """Runs a batch to the end; returns the per-request states (nothing raised for failures)."""
        handle = self.submit(op, local_addrs, peer, region_ids, offsets, lengths, timeout=timeout)
        handle.wait()
        return handle.states()

    def read(
        self,
        local_addr: int,
        peer: Peer,
        region_id: int,
        offset: int,
        length: int,
        *,
        timeout: float | None = None,
        fence: tuple[int, int] = (0, 0),
    ) -> None:
        """Reads one range of a peer region into local memory; raises on failure. `fence`: the
        (slot, generation) of the allocation it reads, in a fenced region."""
        self._one(Op.READ, local_addr, peer, region_id, offset, length, timeout, fence)

    def write(
        self,
        local_addr: int,
        peer: Peer,
        region_id: int,
        offset: int,
        length: int,
        *,
        timeout: float | None = None,
        fence: tuple[int, int] = (0, 0),
    ) -> None:
        """Writes local memory into one range of a peer region; raises on failure. `fence` as for read."""
        self._one(Op.WRITE, local_addr, peer, region_id, offset, length, timeout, fence)

    def transfer_one(
        self,
        op: Op | int,
        local_addr: int,
        peer: Peer,
        region_id: int,
        offset: int,
        length: int,
        *,
        timeout: float | None = None,
        fence: tuple[int, int] = (0, 0),
    ) -> tuple[RequestState, int]:
        """One request, run to the end with the least overhead; returns (state, core error code).
        `fence` is (slot, generation) of the allocation it touches in a fenced region."""
        timeout_ms = self._check_one(local_addr, region_id, offset, length, timeout, fence)
        state, code = self._core_engine().transfer(
            int(op), local_addr, peer.handle, region_id, offset, length, timeout_ms, *fence
        )
        return RequestState(state), code

    def read_one_verified(
        self,
        local_addr: int,
        peer: Peer,
        region_id: int,
        offset: int,
        length: int,
        expected: int,
        *,
        timeout: float | None = None,
        fence: tuple[int, int] = (0, 0),
    ) -> int:
        """One read run to the end as transfer_one runs it, its bytes hashed (XXH3-64) as they land and
        compared with `expected`: a :class:`ReadCheck` value, or the core error code (> 0) of a failed
        read. UNCHECKED where no digest could be taken (GPU memory, no C++ XXH3): verify it yourself."""
        timeout_ms = self._check_one(local_addr, region_id, offset, length, timeout, fence)
        if not (isinstance(expected, int) and 0 <= expected < 1 << 64):
            raise InvalidArgumentError("an expected digest is an integer in [0, 2**64)")
        return int(
            self._core_engine().read_verified(
                local_addr, peer.handle, region_id, offset, length, timeout_ms, *fence, expected
            )
        )

    def _check_one(
        self, local_addr: int, region_id: int, offset: int, length: int, timeout: float | None, fence: Any
    ) -> int:
        """Validates one request's numbers; returns its deadline in milliseconds."""
        values = (local_addr, region_id, offset, length, *fence)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in values):
            raise InvalidArgumentError("addresses, ids, offsets, lengths and fences must be integers")
        if min(values) < 0 or max(local_addr, region_id, offset, length, fence[1]) >= 1 << 64:
            raise InvalidArgumentError("addresses, offsets and lengths must be in [0, 2**64)")
        if fence[0] >= 1 << 32:
            raise InvalidArgumentError("a fence slot must be below 2**32")
        deadline = self.config.transfer_timeout if timeout is None else timeout
        if not 0 <= deadline < 1e9:  # also refuses NaN
            raise InvalidArgumentError("timeout must be 0 or more seconds (and finite)")
        return int(deadline * 1000)

    def _one(
        self,
        op: Op,
        addr: int,
        peer: Peer,
        region_id: int,
        offset: int,
        length: int,
        timeout: float | None,
        fence: tuple[int, int],
    ) -> None:
        state, code = self.transfer_one(
            op, addr, peer, region_id, offset, length, timeout=timeout, fence=fence
        )
        if state != RequestState.COMPLETED:
            raise error_for_code(code, f"{op.name.lower()} of {length} bytes from {peer.name} failed")


def buffer_spans(objects: Sequence[Any], writable: bool) -> tuple[list[int], list[int]] | None:
    """(addresses, lengths) of buffers that export C-contiguous host memory (numpy arrays, bytearrays,
    memoryviews; writable ones when `writable`), found in one call; None when any does not."""
    return _core.buffer_spans(objects, writable)


def range_tags(
    starts: np.ndarray, ends: np.ndarray, tags: np.ndarray, addrs: Any, lengths: Any
) -> np.ndarray | None:
    """Per piece (addrs[i], lengths[i]) the tag of the range [starts[k], ends[k]) that holds it whole
    (`starts` ascending, the ranges disjoint), in one call for the batch; None when a piece is empty or
    outside every range."""
    out: np.ndarray | None = _core.range_tags(starts, ends, tags, addrs, lengths)
    return out


def _as_column(values: Any, dtype: Any) -> np.ndarray:
    """A batch column as a flat array of `dtype`; a value that does not fit is a clear error."""
    target = np.dtype(dtype)
    if isinstance(values, np.ndarray) and values.dtype != target:
        _check_cast(values, target)  # (numpy casts an array silently: -1 would become 2**64 - 1)
    try:
        return np.ascontiguousarray(values, dtype=target).reshape(-1)
    except (OverflowError, TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"a batch column holds a value that is not a {np.dtype(dtype).name}: {exc}"
        ) from None


def _check_cast(values: np.ndarray, target: np.dtype) -> None:
    """An array of another dtype is taken only if every value is an integer (or bool) `target` holds."""
    if values.dtype.kind == "b":
        return
    if values.dtype.kind not in "iu":
        raise InvalidArgumentError(f"a batch column of {values.dtype} values, not integers")
    if values.size:
        low, high, bounds = int(values.min()), int(values.max()), np.iinfo(target)
        if low < bounds.min or high > bounds.max:
            outside = low if low < bounds.min else high
            raise InvalidArgumentError(f"a batch column holds a value that is not a {target.name}: {outside}")


def peer_owned_regions(name: str, timeout: float, secret: bytes) -> tuple[str, dict[int, int]]:
    """(owner, {region id: length}) of the engine at `name` ("host:port"), through its authenticated
    handshake (`secret`: the cluster's): what a master checks a segment's mount against
    (TransferEngine.set_owner). Raises the engine's errors (unreachable, PermissionDenied)."""
    owner, lengths = _core.fetch_owned_regions(name, max(1, int(timeout * 1000)), secret)
    return str(owner), {int(k): int(v) for k, v in lengths.items()}
