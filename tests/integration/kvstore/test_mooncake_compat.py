"""The Mooncake-compatible API driven the way SGLang's HiCache backend and vLLM's connectors drive
Mooncake: setup, register buffers, batch_is_exist, multi-buffer put/get, integer codes."""

from __future__ import annotations

import numpy as np

from kvstore.integrations.mooncake import (
    INVALID_PARAMS,
    OBJECT_ALREADY_EXISTS,
    OBJECT_NOT_FOUND,
    MooncakeDistributedStore,
    ReplicateConfig,
    TransferEngine,
)
from tests.integration.kvstore.conftest import Cluster


def make_store(cluster: Cluster, **overrides: object) -> MooncakeDistributedStore:
    store = MooncakeDistributedStore()
    rc = store.setup("localhost", "P2PHANDSHAKE", 0, 16 * 1024 * 1024, "tcp", "", cluster.master)
    assert rc == 0
    return store


def test_hicache_style_page_flow(cluster: Cluster) -> None:
    store = make_store(cluster)
    try:
        # One host buffer of pages, registered once (as SGLang's HiCache host pool is).
        pages, page_bytes = 8, 64 * 1024
        host = np.zeros(pages * page_bytes, dtype=np.uint8)
        base = host.ctypes.data
        assert store.register_buffer(base, host.nbytes) == 0
        for i in range(pages):
            host[i * page_bytes : (i + 1) * page_bytes] = i + 1
        keys = [f"page-{i}_k" for i in range(pages)]
        assert store.batch_is_exist(keys) == [0] * pages
        # K and V halves of each page as two buffers of one key.
        half = page_bytes // 2
        ptrs = [[base + i * page_bytes, base + i * page_bytes + half] for i in range(pages)]
        sizes = [[half, half] for _ in range(pages)]
        config = ReplicateConfig()
        config.replica_num = 1
        assert store.batch_put_from_multi_buffers(keys, ptrs, sizes, config) == [0] * pages
        assert store.batch_is_exist([*keys, "absent"]) == [1] * pages + [0]
        host[:] = 0
        assert store.batch_get_into_multi_buffers(keys, ptrs, sizes) == [page_bytes] * pages
        for i in range(pages):
            assert (host[i * page_bytes : (i + 1) * page_bytes] == i + 1).all()
        assert store.get_size(keys[0]) == page_bytes
        assert store.get_size("absent") == OBJECT_NOT_FOUND
        assert store.batch_get_into(["absent"], [base], [page_bytes]) == [OBJECT_NOT_FOUND]
        assert store.get_into(keys[0], base, 10) == INVALID_PARAMS  # buffer smaller than the object
        assert store.unregister_buffer(base) == 0
        assert store.unregister_buffer(base) == INVALID_PARAMS
    finally:
        assert store.close() == 0


def test_simple_api_and_codes(cluster: Cluster) -> None:
    store = make_store(cluster)
    try:
        assert store.put("hello_key", b"Hello, Mooncake Store!") == 0
        assert store.get("hello_key") == b"Hello, Mooncake Store!"
        assert store.get("nope") == b""
        assert store.is_exist("hello_key") == 1 and store.is_exist("nope") == 0
        assert store.put("hello_key", b"different") == OBJECT_ALREADY_EXISTS
        assert store.put_batch(["a", "b"], [b"1", b"2"]) == 0
        assert store.get_batch(["a", "b", "c"]) == [b"1", b"2", b""]
        assert store.put_parts("parts", b"ab", b"cd") == 0 and store.get("parts") == b"abcd"
        assert store.remove("nope") == OBJECT_NOT_FOUND
        assert store.remove("a", force=True) == 0
        assert store.remove_all() == 0  # as Mooncake: without force, objects under a read lease stay
        assert store.remove_all(force=True) >= 3  # vLLM's Mooncake connector asks for force
        assert store.get("b") == b""
        assert ":" in store.get_hostname()
    finally:
        store.close()


def test_setup_dict_form_and_bad_master() -> None:
    store = MooncakeDistributedStore()
    assert store.setup({"local_hostname": "localhost", "master_server_address": "127.0.0.1:1"}) < 0
    assert store.setup("localhost", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", "") < 0


def test_transfer_engine_twin() -> None:
    """vLLM's MooncakeConnector: initialize, register memory, write/read by remote virtual address."""
    target, initiator = TransferEngine(), TransferEngine()
    assert target.initialize("localhost", "P2PHANDSHAKE", "tcp", "") == 0
    assert initiator.initialize("localhost", "P2PHANDSHAKE", "tcp", "") == 0
    remote = np.zeros(1 << 20, np.uint8)
    local = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
    assert target.batch_register_memory([remote.ctypes.data], [remote.nbytes]) == 0
    assert initiator.register_memory(local.ctypes.data, local.nbytes) == 0
    session = f"127.0.0.1:{target.get_rpc_port()}"
    assert initiator.transfer_sync_write(session, local.ctypes.data, remote.ctypes.data + 4096, 65536) == 0
    assert np.array_equal(remote[4096 : 4096 + 65536], local[:65536])
    back = np.zeros(65536, np.uint8)
    assert initiator.register_memory(back.ctypes.data, back.nbytes) == 0
    assert (
        initiator.batch_transfer_sync_read(session, [back.ctypes.data], [remote.ctypes.data + 4096], [65536])
        == 0
    )
    assert np.array_equal(back, local[:65536])
    # Outside what the peer registered: refused, nothing written.
    assert (
        initiator.transfer_sync_write(session, local.ctypes.data, remote.ctypes.data + remote.nbytes, 16) != 0
    )
    assert initiator.unregister_memory(back.ctypes.data) == 0


def test_replica_descriptors_and_the_dummy_client(cluster: Cluster) -> None:
    """batch_get_replica_desc lists each present key's replicas; setup_dummy joins without memory."""
    owner = make_store(cluster)
    dummy = MooncakeDistributedStore()
    try:
        assert dummy.setup_dummy(0, 16 << 20, cluster.master) == 0
        assert owner.put("desc", b"x" * 1000) == 0
        found = dummy.batch_get_replica_desc(["desc", "absent"])
        assert list(found) == ["desc"] and len(found["desc"]) == 1
        replica = found["desc"][0]
        assert replica.is_memory_replica() and replica.size == 1000 and replica.status == "COMPLETE"
        assert replica.transport_endpoint.count(":") == 1  # a storage node's endpoint (host:port)
        assert dummy.get("desc") == b"x" * 1000
        assert MooncakeDistributedStore().setup_dummy(0, 1 << 20, "") == INVALID_PARAMS
    finally:
        dummy.close()
        owner.close()
