"""Mooncake-compatible API: swap `from mooncake.store import ...` for
`from kvstore.integrations.mooncake import ...` and a program written for Mooncake runs unchanged.

Method names, argument order and integer return codes follow Mooncake's Python API
(`MooncakeDistributedStore`, `ReplicateConfig`, and the engine's `TransferEngine`). What differs, by
design: no metadata server is needed (`metadata_server` is accepted and ignored: peers handshake
directly), and protocol "tcp"/"rdma" both mean "fastest available" (shared memory on one host, TCP
across hosts) unless KVSTORE_TRANSPORT forces one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvstore import Store
from kvstore.errors import (
    InvalidArgumentError,
    KVStoreError,
    MasterUnavailableError,
    NoSpaceError,
    NotEnoughSegmentsError,
    NotFoundError,
    ObjectBusyError,
    ObjectExistsError,
    ObjectNotFoundError,
    TooManyPutsError,
    TransferConnectionError,
    TransferFailedError,
    TransferTimeoutError,
    error_for_code,
)
from transfer_engine import Op, Peer, RequestState
from transfer_engine import TransferEngine as _Engine

log = logging.getLogger("kvstore.mooncake")

# Mooncake's ErrorCode values (types.h), as its Python API returns them.
OK = 0
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200  # no space
INVALID_KEY = -400
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
TRANSFER_FAIL = -800
RPC_FAIL = -900

_CODES: list[tuple[type[KVStoreError], int]] = [
    (ObjectNotFoundError, OBJECT_NOT_FOUND),
    (NotFoundError, OBJECT_NOT_FOUND),
    (NoSpaceError, NO_AVAILABLE_HANDLE),
    (NotEnoughSegmentsError, NO_AVAILABLE_HANDLE),  # Mooncake has no closer code
    (TooManyPutsError, NO_AVAILABLE_HANDLE),
    (ObjectExistsError, OBJECT_ALREADY_EXISTS),
    (ObjectBusyError, OBJECT_HAS_LEASE),
    (MasterUnavailableError, RPC_FAIL),
    (InvalidArgumentError, INVALID_PARAMS),
    (TransferConnectionError, TRANSFER_FAIL),
    (TransferTimeoutError, TRANSFER_FAIL),
    (TransferFailedError, TRANSFER_FAIL),
]


def mooncake_code(error: KVStoreError | int) -> int:
    """Mooncake's code for a kvstore error (or a negative kvstore per-key result)."""
    if isinstance(error, int):
        if error >= 0:
            return error
        error = error_for_code(-error, "")
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code
    return INTERNAL_ERROR


@dataclass
class ReplicateConfig:
    replica_num: int = 1
    with_soft_pin: bool = False
    with_hard_pin: bool = False
    preferred_segment: str = ""
    prefer_alloc_in_same_node: bool | str = False


@dataclass(frozen=True)
class ReplicaDescriptor:
    """One replica of an object (Mooncake's ReplicaDescriptor, memory replicas only)."""

    transport_endpoint: str  # the holding engine's handshake endpoint
    region_id: int
    offset: int
    size: int
    host_id: str
    status: str = "COMPLETE"

    def is_memory_replica(self) -> bool:
        return True


def _check_protocol(requested: str) -> None:
    """Mooncake's protocol names all mean "the fastest transport that reaches the peer": the engine's
    own setting decides (KVSTORE_TRANSPORT, else auto)."""
    if requested not in ("tcp", "rdma", "auto", ""):
        raise InvalidArgumentError(f"unknown protocol {requested!r}")


def _listen_host(local_hostname: str) -> str:
    host = local_hostname.rsplit(":", 1)[0] if local_hostname.count(":") == 1 else local_hostname
    return "127.0.0.1" if host in ("", "localhost") else host


class MooncakeDistributedStore:
    """Mooncake's store client, backed by kvstore.Store. Every call returns Mooncake's codes."""

    def __init__(self) -> None:
        self._store: Store | None = None
        self._registered: dict[int, int] = {}

    # -- lifecycle ------------------------------------------------------------------------------------
    def setup(
        self,
        local_hostname: str | dict[str, Any],
        metadata_server: str = "P2PHANDSHAKE",
        global_segment_size: int = 16 * 1024 * 1024,
        local_buffer_size: int = 1024 * 1024 * 1024,
        protocol: str = "tcp",
        rdma_devices: str = "",
        master_server_addr: str = "",
        *_: Any,
    ) -> int:
        """Positional form as in Mooncake, or one dict with the same names."""
        if isinstance(local_hostname, dict):
            cfg = local_hostname
            return self.setup(
                cfg.get("local_hostname", "localhost"),
                cfg.get("metadata_server", "P2PHANDSHAKE"),
                int(cfg.get("global_segment_size", global_segment_size)),
                int(cfg.get("local_buffer_size", local_buffer_size)),
                cfg.get("protocol", protocol),
                str(cfg.get("rdma_devices", cfg.get("device_name", ""))),
                str(cfg.get("master_server_addr", cfg.get("master_server_address", ""))),
            )
        try:
            if not master_server_addr:
                raise InvalidArgumentError("master_server_addr is required")
            _check_protocol(protocol)
            self._store = Store.connect(
                master_server_addr,
                segment_size=int(global_segment_size),
                buffer_size=max(int(local_buffer_size), 1 << 20),
                host=_listen_host(local_hostname),
            )
            return OK
        except KVStoreError as exc:
            log.warning("setup failed: %s", exc)
            return mooncake_code(exc)

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int, server_address: str) -> int:
        """Mooncake's "dummy" client (memory served by a separate real client): here a client that
        contributes no memory, with a local buffer, joined to the master at server_address."""
        try:
            if not server_address:
                raise InvalidArgumentError("server_address is required")
            self._store = Store.connect(
                server_address, segment_size=0, buffer_size=max(int(local_buffer_size), 1 << 20)
            )
            return OK
        except KVStoreError as exc:
            log.warning("setup_dummy failed: %s", exc)
            return mooncake_code(exc)

    def close(self) -> int:
        if self._store is not None:
            self._store.close()
            self._store = None
        return OK

    def get_hostname(self) -> str:
        return self._require().engine.name

    def _require(self) -> Store:
        if self._store is None:
            raise InvalidArgumentError("setup() has not succeeded")
        return self._store

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self._require(), *args, **kwargs)
        except KVStoreError as exc:
            return mooncake_code(exc)

    # -- memory ---------------------------------------------------------------------------------------
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        def run(store: Store) -> int:
            store.register_buffer((int(buffer_ptr), int(size)))
            self._registered[int(buffer_ptr)] = int(size)
            return OK

        return int(self._call(run))

    def unregister_buffer(self, buffer_ptr: int) -> int:
        def run(store: Store) -> int:
            size = self._registered.pop(int(buffer_ptr), None)
            if size is None:
                return INVALID_PARAMS
            store.unregister_buffer((int(buffer_ptr), size))
            return OK

        return int(self._call(run))

    # -- puts -----------------------------------------------------------------------------------------
    @staticmethod
    def _options(config: ReplicateConfig | None) -> dict[str, Any]:
        if config is None:
            return {}
        return {"replicas": max(1, int(config.replica_num)), "pin": bool(config.with_hard_pin)}

    def put(self, key: str, value: bytes, config: ReplicateConfig | None = None) -> int:
        return self.put_batch([key], [value], config)

    def put_parts(self, key: str, *parts: bytes, config: ReplicateConfig | None = None) -> int:
        return int(
            self._call(
                lambda s: mooncake_code(
                    s.batch_put_from_multi_buffers([key], [list(parts)], **self._options(config))[0]
                )
            )
        )

    def put_batch(self, keys: list[str], values: list[bytes], config: ReplicateConfig | None = None) -> int:
        def run(store: Store) -> int:
            results = store.batch_put_from(keys, values, **self._options(config))
            bad = [r for r in results if r < 0]
            return mooncake_code(bad[0]) if bad else OK

        return int(self._call(run))

    def put_from(self, key: str, buffer_ptr: int, size: int, config: ReplicateConfig | None = None) -> int:
        return self.batch_put_from([key], [buffer_ptr], [size], config)[0]

    def batch_put_from(
        self, keys: list[str], buffer_ptrs: list[int], sizes: list[int], config: ReplicateConfig | None = None
    ) -> list[int]:
        return self.batch_put_from_multi_buffers(
            keys, [[p] for p in buffer_ptrs], [[s] for s in sizes], config
        )

    def batch_put_from_multi_buffers(
        self,
        keys: list[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        config: ReplicateConfig | None = None,
        *_: Any,
    ) -> list[int]:
        def run(store: Store) -> list[int]:
            buffers = _raw_lists(all_buffer_ptrs, all_sizes, len(keys))
            return [
                mooncake_code(r)
                for r in store.batch_put_from_multi_buffers(keys, buffers, **self._options(config))
            ]

        return self._per_key(run, len(keys))

    # -- gets -----------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The value; empty bytes on a miss or error (as Mooncake)."""
        value = self._call(lambda s: s.get(key))
        return value if isinstance(value, bytes) else b""

    def get_batch(self, keys: list[str]) -> list[bytes]:
        values = self._call(lambda s: s.batch_get(keys))
        return [v or b"" for v in values] if isinstance(values, list) else [b""] * len(keys)

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        return self.batch_get_into([key], [buffer_ptr], [size])[0]

    def batch_get_into(self, keys: list[str], buffer_ptrs: list[int], sizes: list[int]) -> list[int]:
        return self.batch_get_into_multi_buffers(keys, [[p] for p in buffer_ptrs], [[s] for s in sizes])

    def batch_get_into_multi_buffers(
        self,
        keys: list[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        *_: Any,
    ) -> list[int]:
        def run(store: Store) -> list[int]:
            buffers = _raw_lists(all_buffer_ptrs, all_sizes, len(keys))
            return [mooncake_code(r) for r in store.batch_get_into_multi_buffers(keys, buffers)]

        return self._per_key(run, len(keys))

    def _per_key(self, run: Any, n: int) -> list[int]:
        result = self._call(run)
        return result if isinstance(result, list) else [int(result)] * n

    # -- the rest -------------------------------------------------------------------------------------
    def is_exist(self, key: str) -> int:
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys: list[str]) -> list[int]:
        result = self._call(lambda s: [1 if x else 0 for x in s.batch_exists(keys)])
        return result if isinstance(result, list) else [-1] * len(keys)

    def get_size(self, key: str) -> int:
        def run(store: Store) -> int:
            size = store.get_size(key)
            return OBJECT_NOT_FOUND if size is None else size

        return int(self._call(run))

    def remove(self, key: str, force: bool = False) -> int:
        return self.batch_remove([key], force)[0]

    def batch_remove(self, keys: list[str], force: bool = False) -> list[int]:
        return self._per_key(
            lambda s: [mooncake_code(r) for r in s.batch_remove(keys, force=force)], len(keys)
        )

    def remove_all(self, force: bool = False) -> int:
        """Removes every object (leased ones too with force, as vLLM's connector asks); the number
        removed, or a negative code."""
        return int(self._call(lambda s: s.remove_all(force=bool(force))))

    def batch_get_replica_desc(self, keys: list[str]) -> dict[str, list[ReplicaDescriptor]]:
        """Each present key's replicas (absent keys are left out), as Mooncake's descriptor lists."""

        def run(store: Store) -> dict[str, list[ReplicaDescriptor]]:
            out: dict[str, list[ReplicaDescriptor]] = {}
            for key, found in zip(keys, store.locate(keys), strict=True):
                if found is not None:
                    out[key] = [
                        ReplicaDescriptor(r.engine, r.region_id, r.offset, found.size, r.host_id)
                        for r in found.locations
                        if r.engine
                    ]
            return out

        result = self._call(run)
        return result if isinstance(result, dict) else {}


def _raw_lists(
    all_ptrs: Sequence[Sequence[int]], all_sizes: Sequence[Sequence[int]], n: int
) -> list[list[Any]]:
    if len(all_ptrs) != n or len(all_sizes) != n:
        raise InvalidArgumentError("keys, pointer lists and size lists differ in length")
    out = []
    for ptrs, sizes in zip(all_ptrs, all_sizes, strict=True):
        if len(ptrs) != len(sizes):
            raise InvalidArgumentError("a key's pointers and sizes differ in length")
        out.append([(int(p), int(s)) for p, s in zip(ptrs, sizes, strict=True)])
    return out


class TransferEngine:
    """Mooncake's transfer engine API (what vLLM's MooncakeConnector calls), over kvstore's engine.

    Peers are named by "host:port" sessions (get_rpc_port gives the port); remote memory is addressed by
    its virtual address in the peer, translated here to (region, offset) from the peer's handshake.
    """

    def __init__(self) -> None:
        self._engine: _Engine | None = None
        self._regions: dict[int, Any] = {}

    def initialize(
        self,
        local_hostname: str,
        metadata_server: str = "P2PHANDSHAKE",
        protocol: str = "tcp",
        device_name: str = "",
    ) -> int:
        try:
            _check_protocol(protocol)
            self._engine = _Engine(host=_listen_host(local_hostname))
            return OK
        except KVStoreError as exc:
            return mooncake_code(exc)

    def get_rpc_port(self) -> int:
        return int(self._engine_or_fail().name.rsplit(":", 1)[1])

    def get_session_id(self) -> str:
        return self._engine_or_fail().name

    def _engine_or_fail(self) -> _Engine:
        if self._engine is None:
            raise InvalidArgumentError("initialize() has not succeeded")
        return self._engine

    def register_memory(self, buffer_addr: int, capacity: int) -> int:
        try:
            # Mooncake registers memory for its peers to read and write: exported.
            self._regions[int(buffer_addr)] = self._engine_or_fail().register_ptr(
                int(buffer_addr), int(capacity), export=True
            )
            return OK
        except KVStoreError as exc:
            return mooncake_code(exc)

    def batch_register_memory(self, buffer_addrs: list[int], capacities: list[int]) -> int:
        codes = [self.register_memory(a, c) for a, c in zip(buffer_addrs, capacities, strict=True)]
        return next((c for c in codes if c != OK), OK)

    def unregister_memory(self, buffer_addr: int) -> int:
        region = self._regions.pop(int(buffer_addr), None)
        if region is None:
            return INVALID_PARAMS
        self._engine_or_fail().unregister(region)
        return OK

    def batch_unregister_memory(self, buffer_addrs: list[int]) -> int:
        codes = [self.unregister_memory(a) for a in buffer_addrs]
        return next((c for c in codes if c != OK), OK)

    def transfer_sync_write(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int
    ) -> int:
        return self.batch_transfer_sync_write(target_hostname, [buffer], [peer_buffer_address], [length])

    def transfer_sync_read(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int
    ) -> int:
        return self.batch_transfer_sync_read(target_hostname, [buffer], [peer_buffer_address], [length])

    def batch_transfer_sync_write(
        self, target_hostname: str, buffers: list[int], peer_buffer_addresses: list[int], lengths: list[int]
    ) -> int:
        return self._batch(Op.WRITE, target_hostname, buffers, peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(
        self, target_hostname: str, buffers: list[int], peer_buffer_addresses: list[int], lengths: list[int]
    ) -> int:
        return self._batch(Op.READ, target_hostname, buffers, peer_buffer_addresses, lengths)

    def _batch(self, op: Op, target: str, locals_: list[int], remotes: list[int], lengths: list[int]) -> int:
        try:
            engine = self._engine_or_fail()
            if not len(locals_) == len(remotes) == len(lengths):
                return INVALID_PARAMS
            segment = engine.open_peer(target)
            where = _translate(segment, remotes, lengths)
            if where is None:  # the peer may have registered memory since the handshake
                segment = engine.refresh_peer(segment)
                where = _translate(segment, remotes, lengths)
            if where is None:
                return INVALID_PARAMS
            states = engine.transfer_sync(op, locals_, segment, where[0], where[1], lengths)
            return OK if bool(np.all(states == RequestState.COMPLETED)) else TRANSFER_FAIL
        except KVStoreError as exc:
            return mooncake_code(exc)


def _translate(segment: Peer, addresses: list[int], lengths: list[int]) -> tuple[Any, Any] | None:
    """Remote (region ids, offsets) for remote virtual addresses, from the peer's exported regions
    (which never overlap): one sorted search for the whole batch. None when a range is in no region."""
    regions = sorted(segment.regions, key=lambda r: r.base)
    if not regions:
        return None
    try:
        addr = np.asarray(addresses, dtype=np.uint64)
        length = np.asarray(lengths, dtype=np.uint64)
    except OverflowError:  # negative or above 64 bits
        return None
    bases = np.array([r.base for r in regions], dtype=np.uint64)
    ends = bases + np.array([r.length for r in regions], dtype=np.uint64)
    which = np.searchsorted(bases, addr, side="right").astype(np.int64) - 1
    if (which < 0).any():
        return None
    end = ends[which]
    room = np.where(addr < end, end - addr, 0)  # written so that nothing wraps around
    if (length > room).any():
        return None
    ids = np.array([r.id for r in regions], dtype=np.uint64)
    return ids[which], addr - bases[which]


__all__ = ["MooncakeDistributedStore", "ReplicaDescriptor", "ReplicateConfig", "TransferEngine"]
